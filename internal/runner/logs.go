package runner

import (
	"cmp"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/kin-agents/kin/internal/agentlog"
	"github.com/kin-agents/kin/internal/caller"
	"github.com/kin-agents/kin/kin"
)

// logPoll is how often a followed log is checked for growth when no event
// woke the follower.
const logPoll = 100 * time.Millisecond

// logFlushWait bounds how long an agent's end waits for its output to be
// in its log: the drain ends as soon as the last writer of its pipe is
// gone, at once when the agent forked nothing that kept its stdout; a
// process it left behind holding it is killed after the end is recorded.
const logFlushWait = time.Second

// An agent's stdout and stderr go into a named pipe kin drains into
// logs/<id>.log, rotated at the profile's quotas.log_bytes (package
// agentlog): the drains, one per agent whose pipe is read, and the one
// poller that waits for output on them all, are the runner's.

// logConfig is the log of agent id under the profile's quotas.
func (run *Runner) logConfig(id kin.AgentID) agentlog.Config {
	q := run.reg.Profile().Quotas // governor.Load filled the defaults
	return agentlog.Config{Path: run.logPath(id), Bytes: q.LogBytes, Keep: q.LogKeep, Log: run.log,
		OnEnd: func() { run.forgetDrain(id) }}
}

// openLog makes a new agent's pipe and drains it; out is for the process.
func (run *Runner) openLog(id kin.AgentID) (out *os.File, err error) {
	run.logMu.Lock()
	defer run.logMu.Unlock()
	d, out, err := run.logs.Open(run.logConfig(id))
	if err != nil {
		return nil, err
	}
	run.drains[id] = d
	return out, nil
}

// reattachLog drains the pipe of an agent an earlier daemon started.
func (run *Runner) reattachLog(id kin.AgentID) {
	run.logMu.Lock()
	defer run.logMu.Unlock()
	d, err := run.logs.Reattach(run.logConfig(id))
	switch {
	case errors.Is(err, os.ErrNotExist):
		run.log.Warn("agent log not bounded: the agent writes logs/<id>.log itself (started by an older kin)", "agent", id)
	case err != nil:
		run.log.Error("agent log: reattach", "agent", id, "err", err)
	default:
		run.drains[id] = d
	}
}

// forgetDrain drops an ended drain.
func (run *Runner) forgetDrain(id kin.AgentID) {
	run.logMu.Lock()
	defer run.logMu.Unlock()
	if d := run.drains[id]; d != nil {
		select {
		case <-d.Done():
			delete(run.drains, id)
		default:
		}
	}
}

// draining reports whether agent id's output is still being copied.
func (run *Runner) draining(id kin.AgentID) bool {
	run.logMu.Lock()
	defer run.logMu.Unlock()
	return run.drains[id] != nil
}

// awaitLog waits until agent id's output is all in its log, at most until
// deadline.
func (run *Runner) awaitLog(id kin.AgentID, deadline time.Time) {
	run.logMu.Lock()
	d := run.drains[id]
	run.logMu.Unlock()
	if d == nil {
		return
	}
	select {
	case <-d.Done(): // most often, by the time its end is handled: no timer
		return
	default:
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-d.Done():
	case <-t.C:
	}
}

// holdPipes holds the pipes of agents' drains at their paths once drained
// (agentlog's HoldRetire), until retirePipes: a cancellation's record
// waits for its agents' output, and their pipes are renamed (kept for later
// agents) or removed after it.
func (run *Runner) holdPipes(agents []*kin.Agent) []*agentlog.Drain {
	run.logMu.Lock()
	defer run.logMu.Unlock()
	var ds []*agentlog.Drain
	for _, a := range agents {
		if d := run.drains[a.ID]; d != nil {
			d.HoldRetire()
			ds = append(ds, d)
		}
	}
	return ds
}

// retirePipes ends holdPipes: the pipes of the drains that ended are
// retired now, one after another on this goroutine (the kernel serialises
// their renames on the directory's lock anyway); the others when they end.
func retirePipes(ds []*agentlog.Drain) {
	for _, d := range ds {
		d.Retire()
	}
}

// closeLogs ends the drains at shutdown. Agents stopped, each drain ends
// once it copied what they wrote last (waited for up to a few seconds);
// agents left running keep their pipes for the next daemon (Detach).
func (run *Runner) closeLogs(wait bool) {
	run.logMu.Lock()
	ds := make(map[kin.AgentID]*agentlog.Drain, len(run.drains))
	for id, d := range run.drains {
		ds[id] = d
	}
	run.logMu.Unlock()
	deadline := time.Now().Add(5 * time.Second)
	for id, d := range ds {
		if wait {
			run.awaitLog(id, deadline)
		}
		d.Detach()
	}
}

// removeStalePipes removes the pipes of agents no drain reads after
// re-adoption: their agents ended while no daemon ran.
func (run *Runner) removeStalePipes(last kin.AgentID) {
	pipes, _ := filepath.Glob(filepath.Join(run.cfg.Home, "logs", "*.log.pipe"))
	for _, p := range pipes {
		id, err := kin.ParseAgentID(strings.TrimSuffix(filepath.Base(p), ".log.pipe"))
		if err == nil && id > last {
			continue // an agent this daemon started: its pipe may be made and not yet drained
		}
		if err != nil || !run.draining(id) {
			os.Remove(p)
		}
	}
}

// Logs streams an agent's captured stdout and stderr from req.Offset: a
// byte offset into what is kept now (the rotated files oldest first, then
// the current one). Without Follow it ends with what was kept when it
// began; with Follow it goes on, across rotations, until the agent has
// ended and everything was sent.
func (run *Runner) Logs(ctx context.Context, req kin.LogsRequest, fn func([]byte) error) error {
	if err := run.authorize(ctx, req.ID, true); err != nil {
		return err
	}
	if req.Offset < 0 {
		return kin.Errorf(kin.ECodeInvalid, "offset %d is negative", req.Offset)
	}
	if req.Tail < 0 {
		return kin.Errorf(kin.ECodeInvalid, "tail %d is negative", req.Tail)
	}
	a, err := run.store.AgentGetByID(ctx, req.ID)
	if err != nil {
		return run.agentError(err, req.ID)
	}
	if len(a.Command) == 0 {
		return kin.Errorf(kin.ECodeInvalid, "agent %d was registered without a process: it has no log", req.ID)
	}
	if !run.ownsAgent(a) {
		return run.remoteLogs(ctx, a, req, fn)
	}
	buf := make([]byte, 32<<10)
	if req.Follow {
		// Whether a restarted daemon's agent still runs, and so writes
		// more, is known once it is checked.
		if err := run.awaitReconciled(ctx, req.ID); err != nil {
			return err
		}
	}
	r := agentlog.NewReader(run.logPath(req.ID), req.Offset, req.Tail)
	defer r.Close()
	if !req.Follow {
		// What is kept when the read begins, and no more: an agent writing
		// faster than its reader reads must not make the read endless.
		return r.ReadKept(buf, fn)
	}
	for {
		wake := run.store.Wait()
		// No process and no drain: nothing more will be written.
		ended := run.runtimeOf(req.ID) == nil && !run.draining(req.ID)
		if err := r.ReadAvailable(buf, fn); err != nil {
			return err
		}
		if ended {
			return nil
		}
		t := time.NewTimer(logPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-run.closing:
			t.Stop()
			return kin.Errorf(kin.ECodeUnavailable, "the daemon is shutting down")
		case <-wake:
		case <-t.C:
		}
		t.Stop()
	}
}

// remoteLogs streams the log of an agent another host of the fleet runs
// (and keeps its log), through that host's API (package peer): the caller
// was checked here. A host's own peers are answered for its own agents
// only, so a request never goes round.
func (run *Runner) remoteLogs(ctx context.Context, a *kin.Agent, req kin.LogsRequest, fn func([]byte) error) error {
	if p := caller.Of(ctx).Peer; p != "" {
		return kin.Errorf(kin.ECodeNotFound, "agent %d runs on host %s, not on %s (asked by host %s)", a.ID, a.Host, run.cfg.Host, p)
	}
	if run.cfg.Remote == nil {
		return kin.Errorf(kin.ECodeUnavailable, "agent %d runs on host %s, and its log is there: this daemon cannot reach other hosts", a.ID, a.Host)
	}
	return run.cfg.Remote.Logs(ctx, a.Host, req, fn)
}

// trimEndedLogs bounds the logs of the ended agents of a tree (issue 21),
// given agents that just ended. An ended agent's log is not removed on its
// own, and max_children counts live children only, so without this a
// parent would keep n × log_bytes × (1 + log_keep) on disk through n
// children spawned one after the other. The ended agents below a root
// share one log quota, the root's log_bytes × (1 + log_keep): past it,
// the logs of those that ended first lose their oldest files first. The
// root's own log is its own quota, live agents' logs theirs.
//
// It runs on every agent's end, so it is incremental: each tree's ended
// logs are kept in memory in the order they ended (agentlog.Ended), read
// from the store and the disk once per tree per daemon run; an end adds
// its agent's files (a few lstats) and removes the oldest past the quota.
// (It read the whole tree from the store and the disk on every end.)
func (run *Runner) trimEndedLogs(ctx context.Context, ended ...kin.AgentID) {
	run.trimEnded(ctx, nil, ended)
}

// trimEnded is trimEndedLogs given, in known, the rows of agents as they
// were just recorded ended (a cancellation's): a tree's first trim in this
// daemon run then reads from the store only the agents below its root that
// are not among them (a cascade's or a shutdown's trim read every agent of
// the subtree it had just recorded).
func (run *Runner) trimEnded(ctx context.Context, known map[kin.AgentID]*kin.Agent, ended []kin.AgentID) {
	run.trimMu.Lock() // two ends in one tree must not both decide on the same files
	defer run.trimMu.Unlock()
	roots := map[kin.AgentID]bool{}
	var rootsEnded []kin.AgentID
	var these map[kin.AgentID]bool // ended, once a tree is read here
	for _, id := range ended {
		chain := run.lineage.Chain(id)
		if len(chain) == 0 {
			continue
		}
		root := chain[len(chain)-1]
		if id == root {
			rootsEnded = append(rootsEnded, root)
			continue
		}
		t, loaded := run.endedLogs[root]
		if !loaded {
			// The tree's earlier ends; these are added below in their
			// order, each once (the read found them too, and a cascade
			// counted its logs twice: trimmed at half the quota).
			if these == nil {
				these = make(map[kin.AgentID]bool, len(ended))
				for _, e := range ended {
					these[e] = true
				}
			}
			t = run.loadEndedLogs(ctx, root, known, these)
			run.endedLogs[root] = t
		}
		t.Add(run.logPath(id))
		roots[root] = true
	}
	for root := range roots {
		c := run.logConfig(root)
		t := run.endedLogs[root]
		if removed, err := t.Trim(c.Bytes * int64(1+c.Keep)); removed > 0 || err != nil {
			run.log.Info("agent logs: removed the oldest of ended agents' logs past their root's quota", "root", root, "removed", removed, "kept", t.Bytes(), "err", err)
		}
	}
	for _, root := range rootsEnded {
		delete(run.endedLogs, root) // nothing more ends below it: its tree was cancelled
	}
}

// loadEndedLogs reads the ended agents below root whose output is all in
// their logs, but those of except, in the order they ended: those in known
// as they are there, the others from the store.
func (run *Runner) loadEndedLogs(ctx context.Context, root kin.AgentID, known map[kin.AgentID]*kin.Agent, except map[kin.AgentID]bool) *agentlog.Ended {
	t := &agentlog.Ended{}
	below := run.lineage.Subtree(root)
	if len(below) < 2 {
		return t
	}
	var as []*kin.Agent
	var ask []kin.AgentID
	for _, id := range below[1:] {
		if except[id] {
			continue
		}
		if a := known[id]; a != nil {
			as = append(as, a)
		} else {
			ask = append(ask, id)
		}
	}
	if len(ask) > 0 {
		read, err := run.store.AgentListByIDs(ctx, ask)
		if err != nil {
			run.log.Warn("agent logs: read the ended agents'", "root", root, "err", err)
			return t
		}
		as = append(as, read...)
	}
	ended := as[:0]
	for _, a := range as {
		if !a.EndedAt.IsZero() && len(a.Command) > 0 && run.runtimeOf(a.ID) == nil && !run.draining(a.ID) {
			ended = append(ended, a)
		}
	}
	slices.SortFunc(ended, func(a, b *kin.Agent) int {
		if c := a.EndedAt.Compare(b.EndedAt); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	for _, a := range ended {
		t.Add(run.logPath(a.ID))
	}
	return t
}
