package runner

import (
	"context"
	"os"
	"path/filepath"
	"strings"

	"github.com/kin-agents/kin/internal/ctxfs"
	"github.com/kin-agents/kin/internal/handoff"
	"github.com/kin-agents/kin/kin"
)

// repairCtx restores, from the store, the files of a's session and of its
// folder in its parent's session that the event log does not rewrite
// (ctxfs.RepairSession, RepairChildDir): the writer calls it for every
// agent while it rebuilds the tree after a crash of the machine.
func (run *Runner) repairCtx(ctx context.Context, a *kin.Agent, c *ctxAgent) {
	if c.session.Agent == "" {
		return
	}
	spec, err := run.store.AgentProcessSpec(ctx, a.ID)
	if err != nil {
		run.log.Warn("agent filesystem: rebuild: process spec", "agent", a.ID, "err", err)
		return
	}
	task, files, err := run.handoffFiles(a, spec.Handoff)
	if err != nil {
		run.log.Warn("agent filesystem: rebuild: handoff", "agent", a.ID, "err", err)
	}
	when := a.StartedAt
	if when.IsZero() {
		when = a.CreatedAt
	}
	sp := ctxfs.SessionParams{
		Session: c.session, AgentID: a.ID, Run: runID(a.ID), Parent: c.rt.Parent, State: a.State,
		Output: c.resultChan, Cwd: run.agentCwd(spec, c.session), Handoff: task, Context: files, Now: when,
	}
	if n, err := run.ctx.RepairSession(sp); err != nil {
		run.log.Warn("agent filesystem: rebuild: session", "agent", a.ID, "err", err)
	} else if n > 0 {
		run.log.Info("agent filesystem: rebuild: restored session files", "agent", a.ID, "files", n)
	}
	if a.Parent == 0 {
		return
	}
	p, err := run.store.AgentGetByID(ctx, a.Parent)
	if err != nil || p.Session == "" {
		return
	}
	parent := ctxfs.Session{Owner: run.agentOwner(p.ID), Agent: p.Name, ID: p.Session}
	name, ok := run.findChildDir(parent, a)
	if !ok {
		name, ok = run.emptiedChildDir(parent, a)
	}
	if !ok {
		return
	}
	status := ctxfs.ChildRunning
	if st := ctxfs.ChildStatus(a.Result); a.Result != "" && st.Valid() {
		status = st
	}
	cp := ctxfs.ChildParams{Parent: parent, Child: name, ChildID: a.ID, ChildSession: c.session.ID, Status: status, Handoff: task}
	if n, err := run.ctx.RepairChildDir(cp); err != nil {
		run.log.Warn("agent filesystem: rebuild: the parent's context/child", "agent", a.ID, "err", err)
	} else if n > 0 {
		run.log.Info("agent filesystem: rebuild: restored the parent's context/child files", "agent", a.ID, "files", n)
	}
	run.ctxMu.Lock()
	if c.parent.Agent == "" {
		c.parent, c.childDir = parent, name
	}
	run.ctxMu.Unlock()
}

// emptiedChildDir is the first of childDirNames that exists in the
// parent's context/child/ with an agent file a crash emptied (or lost):
// a's folder, since an earlier agent's would name that agent.
func (run *Runner) emptiedChildDir(parent ctxfs.Session, a *kin.Agent) (string, bool) {
	for _, name := range childDirNames(a) {
		dir := run.ctx.ChildDir(parent.UID, parent.Agent, parent.ID, name)
		if st, err := os.Lstat(dir); err != nil || !st.IsDir() {
			continue // no such folder
		}
		b, err := run.ctx.ReadFile(filepath.Join(dir, ctxfs.FileChildAgent), 64)
		if err != nil || strings.TrimSpace(string(b)) == "" {
			return name, true
		}
	}
	return "", false
}

// handoffFiles is what a spawn's handoff puts in the child's context/: the
// task (handoff.md) and the other files, with seed 001's "policy subset"
// and "mount subset", what the child holds.
func (run *Runner) handoffFiles(a *kin.Agent, raw []byte) ([]byte, []ctxfs.File, error) {
	h, err := handoffOf(raw)
	if err != nil || h == nil {
		return nil, nil, err
	}
	h.Policy, h.Mounts, _ = run.auth.Control(a.ID)
	hf, err := h.Marshal()
	if err != nil {
		return nil, nil, err
	}
	var task []byte
	var files []ctxfs.File
	for _, f := range hf {
		if f.Name == handoff.FileHandoff {
			task = f.Data
			continue
		}
		files = append(files, ctxfs.File{Name: f.Name, Data: f.Data})
	}
	return task, files, nil
}
