package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/kin-agents/kin/internal/caller"
	"github.com/kin-agents/kin/internal/ctxfs"
	"github.com/kin-agents/kin/internal/handoff"
	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/kin"
)

// outcome is what became of a child's result when it ended.
type outcome struct {
	status     kin.ResultStatus
	violations []string
}

// appendResult appends the agent.result event: where a's handed-back
// result stands, and what it lacks.
func appendResult(ctx context.Context, tx store.Tx, at time.Time, a, parent kin.AgentID, st kin.ResultStatus, violations []string) error {
	return store.AppendEvent(ctx, tx, at, kin.EventAgentResult, a, parent, kin.AgentResultData{Agent: a, Parent: parent, Status: st, Violations: violations})
}

// collectResult is seed 001's "child to parent" for an agent whose process
// has ended: copy result.md, refs.jsonl and artifact/ from its output/ into
// the parent's context/child/<child>/ (the copy first, so nothing the child
// left running can change what is checked), check the copy against the
// contract and every ref's sha256, keep the refs with the hashes kin
// computed, and write the status. A result that fails its contract is kept
// and marked. An exit known to be a failure is failed whatever the result
// says; an unknown exit (a re-adopted process) is judged by its result.
func (run *Runner) collectResult(a *kin.Agent, c *ctxAgent, exit kin.Exit) outcome {
	failed := exit.Known && (exit.Code != 0 || exit.Signal != "")
	if c.session.Agent == "" {
		return outcome{status: kin.ResultFailed, violations: []string{"the agent has no session"}}
	}
	out, dir := run.ctx.OutputDir(c.session.UID, a.Name, c.session.ID), run.resultDir(a, c)
	if dir != out {
		_, err := run.makeFleetHandoff(c, dir)
		if err == nil {
			_, err = run.ctx.CopyResult(out, dir)
		}
		if err != nil {
			run.log.Warn("copy result", "agent", a.ID, "err", err)
			o := outcome{status: kin.ResultContractViolated, violations: []string{"the result could not be copied: " + err.Error()}}
			if failed {
				o.status = kin.ResultFailed
			}
			run.setChildStatus(c, o.status)
			return o
		}
	}
	rep, err := run.checkResult(c, dir)
	o := outcome{status: kin.ResultCompleted}
	switch {
	case err != nil:
		o.status, o.violations = kin.ResultContractViolated, []string{"the result could not be checked: " + err.Error()}
	default:
		if rep.Status != handoff.StatusCompleted {
			o.status = kin.ResultContractViolated
		}
		for _, v := range rep.Violations {
			o.violations = append(o.violations, v.String())
		}
		if dir != out { // the parent's copy carries only hashes kin vouches for
			if refs, err := handoff.MarshalRefs(rep.VerifiedRefs()); err == nil {
				owner := c.parent.Owner
				if c.remoteParent != "" {
					owner = ctxfs.Owner{UID: os.Geteuid(), GID: os.Getegid()}
				}
				if err := run.ctx.WriteFile(filepath.Join(dir, handoff.FileRefs), refs, owner, ctxfs.ModeAgentFile); err != nil {
					run.log.Warn("write verified refs", "agent", a.ID, "err", err)
				}
			}
		}
	}
	if failed {
		o.status = kin.ResultFailed
		o.violations = append([]string{"the process ended with " + exit.String()}, o.violations...)
	}
	run.setChildStatus(c, o.status)
	return o
}

// checkResult runs handoff.CheckWith on dir, opened without following a
// link. Absolute refs are read only inside what the child was handed: its
// input refs and the mounts of its mount subset (a daemon running as root
// would otherwise tell a child the hash of any file it names).
func (run *Runner) checkResult(c *ctxAgent, dir string) (handoff.Report, error) {
	root, err := run.openRoot(dir)
	if err != nil {
		return handoff.Report{}, err
	}
	defer root.Close()
	opts := handoff.CheckOptions{}
	if run.uids != nil {
		opts.AbsRoots = c.absRoots()
	}
	return handoff.CheckRoot(c.resultContract(), root, opts)
}

// resultContract is the contract c's result is checked against: its
// handoff's, else the default.
func (c *ctxAgent) resultContract() handoff.Contract {
	if c.contract != nil {
		return *c.contract
	}
	return handoff.DefaultContract()
}

// absRoots are the absolute paths a child's refs may be verified under.
func (c *ctxAgent) absRoots() []string {
	roots := []string{}
	for _, m := range c.rt.Mount {
		p, _, _ := strings.Cut(m, " ")
		if filepath.IsAbs(p) {
			roots = append(roots, p)
		}
	}
	return append(roots, c.inputRefs...)
}

// setChildStatus writes the status file of c's folder in its parent's session.
func (run *Runner) setChildStatus(c *ctxAgent, st kin.ResultStatus) {
	if c.parent.Agent == "" || c.childDir == "" {
		return
	}
	if err := run.ctx.SetChildStatus(c.parent, c.childDir, ctxfs.ChildStatus(st)); err != nil {
		run.log.Warn("child status", "child", c.childDir, "err", err)
		return
	}
	run.ctxMu.Lock()
	c.childStatus = st
	run.ctxMu.Unlock()
}

// Wait blocks until the agent has ended and kin has kept its result and
// brought its files up to date, then returns its result.
func (run *Runner) Wait(ctx context.Context, req kin.WaitRequest) (*kin.AgentResult, error) {
	if err := run.authorize(ctx, req.ID, false); err != nil {
		return nil, err
	}
	if req.Timeout < 0 || time.Duration(req.Timeout) > kin.MaxWait {
		return nil, kin.Errorf(kin.ECodeInvalid, "timeout %s is outside 0..%s", time.Duration(req.Timeout), kin.MaxWait)
	}
	if req.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(req.Timeout))
		defer cancel()
	}
	for {
		changed := run.store.Wait()
		a, err := run.store.AgentGetByID(ctx, req.ID)
		if err != nil {
			return nil, run.waitError(ctx, req, run.agentError(err, req.ID))
		}
		if ended(a) {
			seq, err := run.store.EventLastSeq(ctx)
			if err == nil {
				err = run.ctxw.waitApplied(ctx, seq)
			}
			if err == nil {
				err = run.awaitFetch(ctx, a.ID) // a child on another host: its result fetched
			}
			if err != nil {
				return nil, run.waitError(ctx, req, err)
			}
			return run.result(ctx, a)
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, run.waitError(ctx, req, ctx.Err())
		case <-run.closing:
			return nil, kin.Errorf(kin.ECodeUnavailable, "the daemon is shutting down")
		}
	}
}

// ended: the agent's process is over (for a registered-only agent: it is
// terminated, revoked or in a final state) and its result, if it hands one
// back, is kept. A revoked agent whose process still runs has not ended.
func ended(a *kin.Agent) bool {
	over := a.State.Terminal() || a.Status == kin.StatusTerminated || a.Status == kin.StatusRevoked
	if a.PID != 0 {
		over = !a.EndedAt.IsZero()
	}
	return over && (a.Result == "" || a.Result.Ended())
}

func (run *Runner) waitError(ctx context.Context, req kin.WaitRequest, err error) error {
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
		return kin.Errorf(kin.ECodeTimeout, "agent %d has not ended within %s", req.ID, time.Duration(req.Timeout))
	}
	return err
}

// Result returns an agent's result as kin kept it, ended or not.
func (run *Runner) Result(ctx context.Context, id kin.AgentID) (*kin.AgentResult, error) {
	if err := run.authorize(ctx, id, true); err != nil {
		return nil, err
	}
	a, err := run.store.AgentGetByID(ctx, id)
	if err != nil {
		return nil, run.agentError(err, id)
	}
	return run.result(ctx, a)
}

func (run *Runner) result(ctx context.Context, a *kin.Agent) (*kin.AgentResult, error) {
	r := &kin.AgentResult{Agent: a, Status: a.Result, Refs: []kin.Ref{}, Violations: []string{}}
	if a.Result == "" {
		return r, nil
	}
	c := run.ctxAgentOf(ctx, a)
	r.Dir = run.resultDir(a, c)
	if r.Dir == "" {
		return r, nil
	}
	if b, err := run.ctx.ReadFile(filepath.Join(r.Dir, handoff.FileResult), handoff.MaxResultBytes); err == nil {
		r.Result = string(b)
	} else if !errors.Is(err, fs.ErrNotExist) {
		r.Violations = append(r.Violations, "result.md could not be read: "+err.Error())
	}
	if b, err := run.ctx.ReadFile(filepath.Join(r.Dir, handoff.FileRefs), handoff.MaxRefsFile); err == nil {
		refs, err := handoff.ParseRefs(b)
		if err != nil {
			r.Violations = append(r.Violations, err.Error())
		}
		for _, ref := range refs {
			r.Refs = append(r.Refs, kin.Ref{Path: ref.Path, Hash: ref.Hash, Kind: ref.Kind, Summary: ref.Summary})
		}
	}
	if a.Result.Ended() {
		// Its own last agent.result.
		evs, err := run.store.EventList(ctx, kin.EventFilter{Agent: a.ID, Subject: true, Types: []string{kin.EventAgentResult}, Before: math.MaxInt64, Limit: 1})
		if err != nil {
			return nil, run.storeError(err)
		}
		for _, e := range evs {
			var rd kin.AgentResultData
			if err := json.Unmarshal(e.Data, &rd); err == nil {
				r.Violations = append(r.Violations, rd.Violations...)
			}
		}
	}
	return r, nil
}

// ContextPack returns what the agent's context should include about its
// children (seed 001): each child's status, task, result.md, refs and
// needed artifacts; never a child's messages.jsonl. Id 0 is the caller.
func (run *Runner) ContextPack(ctx context.Context, id kin.AgentID) (*kin.ContextPack, error) {
	if id == 0 {
		id = caller.Of(ctx).Agent
		if id == 0 {
			return nil, kin.Errorf(kin.ECodeInvalid, "name an agent: the operator has no context")
		}
	}
	if err := run.authorize(ctx, id, true); err != nil {
		return nil, err
	}
	a, err := run.store.AgentGetByID(ctx, id)
	if err != nil {
		return nil, run.agentError(err, id)
	}
	out := &kin.ContextPack{Agent: id}
	var dirs []handoff.PackDir
	defer func() {
		for _, pd := range dirs {
			pd.Root.Close()
		}
	}()
	if a.Session != "" {
		s := ctxfs.Session{Owner: run.agentOwner(a.ID), Agent: a.Name, ID: a.Session}
		children := filepath.Join(run.ctx.ContextDir(s.UID, a.Name, a.Session), "child")
		if cf, err := run.ctx.OpenDir(children); err == nil {
			entries, _ := cf.ReadDir(-1)
			cf.Close()
			for _, e := range entries {
				if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
					continue
				}
				if root, err := run.openRoot(filepath.Join(children, e.Name())); err == nil {
					dirs = append(dirs, handoff.PackDir{Name: e.Name(), Root: root})
				}
			}
		}
	}
	pack, err := handoff.ContextPackRoots(dirs, handoff.PackOptions{})
	if err != nil {
		return nil, kin.Errorf(kin.ECodeInternal, "context pack of agent %d: %v", id, err)
	}
	out.Text = pack.Text()
	if out.Children, err = json.Marshal(pack.Children); err != nil {
		return nil, fmt.Errorf("context pack: %w", err)
	}
	return out, nil
}

// keepPartial copies a stopped agent's output/ into its parent's
// context/child/<child>/ as it is, unchecked (its status says cancelled).
func (run *Runner) keepPartial(ctx context.Context, a *kin.Agent) {
	c := run.ctxAgentOf(ctx, a)
	if c.session.Agent == "" || !c.resultChan {
		return
	}
	out, dir := run.ctx.OutputDir(c.session.UID, a.Name, c.session.ID), run.resultDir(a, c)
	if dir == "" || dir == out {
		return // kept where it is
	}
	if _, err := run.makeFleetHandoff(c, dir); err != nil {
		run.log.Warn("keep partial result", "agent", a.ID, "err", err)
		return
	}
	if _, err := run.ctx.CopyResult(out, dir); err != nil {
		run.log.Warn("keep partial result", "agent", a.ID, "err", err)
	}
}
