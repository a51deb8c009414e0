package runner

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kin-agents/kin/internal/agentsock"
	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/internal/supervisor"
	"github.com/kin-agents/kin/kin"
)

// While the daemon is down, agents keep running: nothing can supervise them,
// and killing a tree because its supervisor restarted would be worse. When
// the daemon comes back it reconciles:
//
//   - an agent the store says is running whose process is still alive in
//     its cgroup is re-adopted: supervised again (its end is noticed through
//     a pidfd, though its exit status cannot be collected: it is no longer
//     the daemon's child), its socket reopened;
//   - one whose process is gone is recorded "lost" (state exited, status
//     unknown), and its owned subtree is cancelled as for any parent death;
//     so is the owned subtree of an agent whose process had ended and been
//     recorded but whose children were not yet cancelled when the daemon
//     died, so that a daemon killed in the middle of this converges;
//   - a cancellation the earlier daemon began (agents left "stopping") is
//     finished;
//   - groups under kin's root cgroup that belong to no running agent are
//     killed.
//
// So no process of an agent is left running unaccounted for. With PID
// namespaces (no writable cgroup v2) an agent's init is found by its pid,
// checked to be the init of a namespace of its own whose environment names
// the agent, and re-adopted with its namespace. With process groups nothing
// can be re-adopted: leftover agent processes are found by their pid and
// KIN_AGENT_ID and killed, and recorded lost.
//
// Only reading what to check happens before the daemon serves
// (planReconcile: the agents the store says run); the checks, from finding
// the groups on disk on, run in the background (reconcile), so a daemon
// restarted with thousands of live agents answers at once. Until an agent is checked it is
// pending: shown as such (kin.Agent.Reconciling, kin.DaemonStatus.Reconciling),
// and whatever needs its process (a stop, a freeze, a spawn under it, its
// resources) waits for its check (awaitReconciled). The cancellations that
// follow run in parallel, as exit handling does.

// reconcileChunk is how many agents one pass re-adopts and records in one
// transaction; reconcileWorkers how many passes run at once.
const (
	reconcileChunk   = 64
	reconcileWorkers = 4
)

// defaultCgroupName is "kin-" and a hash of the home: stable across
// restarts, distinct per home.
func defaultCgroupName(home string) string {
	abs, err := filepath.Abs(home)
	if err != nil {
		abs = home
	}
	sum := sha256.Sum256([]byte(abs))
	return "kin-" + hex.EncodeToString(sum[:6])
}

// reconcilePlan is what a restart's reconciliation checks.
type reconcilePlan struct {
	running []*kin.Agent // what the store says runs, by id
	// last is the highest agent id when the daemon started: a group of a
	// later agent is one this daemon started, never a stray.
	last kin.AgentID
}

// planReconcile reads which agents the store says run and marks them
// pending, before the daemon serves.
func (run *Runner) planReconcile(ctx context.Context) (*reconcilePlan, error) {
	p := &reconcilePlan{}
	for _, st := range []kin.State{kin.StateRegistered, kin.StateActive, kin.StateStale, kin.StateOffline, kin.StateSuspended, kin.StateStopping} {
		as, err := run.store.AgentList(ctx, kin.AgentFilter{State: st})
		if err != nil {
			return nil, err
		}
		for _, a := range as {
			if a.Running() && run.ownsAgent(a) { // another host's agents are its daemon's
				p.running = append(p.running, a)
			}
		}
	}
	// Parents first (ids grow down the tree): a PID namespace's virtual
	// path nests under its parent's.
	slices.SortFunc(p.running, func(a, b *kin.Agent) int { return cmp.Compare(a.ID, b.ID) })
	links, err := run.store.AgentLinks(ctx)
	if err != nil {
		return nil, err
	}
	for _, l := range links {
		p.last = max(p.last, l.ID)
	}
	run.rtMu.Lock()
	for _, a := range p.running {
		run.pending[a.ID] = make(chan struct{})
	}
	run.rtMu.Unlock()
	if len(p.running) > 0 {
		run.log.Info("reconciling: agents the store says run are checked in the background", "agents", len(p.running))
	}
	return p, nil
}

// reconcile checks every agent of p (in the background, from Start): the
// live ones re-adopted, the dead ones recorded lost, each released from
// pending as soon as it is; then it starts, in parallel, the cancellations
// this calls for (exitWG's, like exit handling), and kills the stray
// groups.
func (run *Runner) reconcile(p *reconcilePlan) {
	ctx := context.Background()
	began := time.Now()
	groups := map[kin.AgentID]supervisor.Group{}
	if run.sup.Containment() == supervisor.ContainmentCgroup2 {
		found, err := run.sup.Discover()
		for try := 1; err != nil && try < 3; try++ {
			run.log.Warn("discover agent cgroups: trying again", "err", err)
			found, err = run.sup.Discover()
		}
		if err != nil {
			// An agent whose group was not found is recorded lost.
			run.log.Error("discover agent cgroups", "err", err)
		}
		for _, g := range found {
			groups[g.ID] = g
		}
	}
	// Taking the groups and processes back is quick and goes parents
	// first; re-adopting (a pidfd, a socket, an event) is the slow part
	// and goes in chunks, several at a time.
	alive := make([]bool, len(p.running))
	known := map[kin.AgentID]bool{}
	for i, a := range p.running {
		known[a.ID] = true
		alive[i] = run.takeBack(a, groups)
	}
	var (
		mu            sync.Mutex
		adopted, lost []*kin.Agent
		unfinished    []*kin.Agent
		next          atomic.Int64
		wg            sync.WaitGroup
		nchunks       = (len(p.running) + reconcileChunk - 1) / reconcileChunk
	)
	for range min(reconcileWorkers, nchunks) {
		wg.Go(func() {
			for c := int(next.Add(1) - 1); c < nchunks; c = int(next.Add(1) - 1) {
				lo, hi := c*reconcileChunk, min((c+1)*reconcileChunk, len(p.running))
				ad, lo2 := run.reconcileChunk(ctx, p.running[lo:hi], alive[lo:hi])
				mu.Lock()
				adopted, lost = append(adopted, ad...), append(lost, lo2...)
				for _, a := range ad {
					if a.State == kin.StateStopping {
						unfinished = append(unfinished, a)
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	run.log.Info("reconciled", "adopted", len(adopted), "lost", len(lost), "took", time.Since(began).String())

	// Parent death applies to what happened while the daemon was down: to
	// the lost, and to agents whose end an earlier daemon recorded without
	// cancelling their children.
	dead := map[kin.AgentID]bool{}
	for _, a := range lost {
		dead[a.ID] = true
	}
	var parents []kin.AgentID
	seen := map[kin.AgentID]bool{}
	for _, a := range adopted {
		if a.Parent != 0 && !known[a.Parent] && !seen[a.Parent] {
			seen[a.Parent] = true
			parents = append(parents, a.Parent)
		}
	}
	if len(parents) > 0 {
		ps, err := run.store.AgentListByIDs(ctx, parents)
		if err != nil {
			run.log.Error("reconcile: read parents", "err", err)
		}
		for _, par := range ps {
			if par.PID != 0 && !par.EndedAt.IsZero() {
				dead[par.ID] = true
			}
		}
	}
	for id := range dead {
		run.inBackground(func() {
			if _, err := run.cancelTree(ctx, cancelParams{Root: id, Reason: reasonParentDead}); err != nil {
				run.log.Error("cancel children of an agent that ended while the daemon was down", "agent", id, "err", err)
			}
		})
	}
	// A cancellation the old daemon had begun is finished.
	for _, a := range unfinished {
		run.inBackground(func() {
			if _, err := run.cancelTree(ctx, cancelParams{Root: a.ID, Reason: reasonStopped, IncludeRoot: true}); err != nil {
				run.log.Error("finish stop", "agent", a.ID, "err", err)
			}
		})
	}
	// Groups of no running agent: kill them. Not those of agents this
	// daemon started meanwhile, nor a group that holds a running agent's
	// (the group of a parent without a process of its own, made for its
	// children to nest in).
	for id, g := range groups {
		if known[id] || id > p.last || holdsRunning(g.Path, groups, known) {
			continue
		}
		if _, err := run.sup.Adopt(g.Path); err == nil {
			run.inBackground(func() {
				if err := run.sup.Kill(ctx, id); err != nil && !errors.Is(err, supervisor.ErrUnknownAgent) {
					run.log.Error("kill stray group", "path", g.Path, "err", err)
				}
			})
		}
	}
}

// holdsRunning reports whether a running agent's group lies below dir.
func holdsRunning(dir string, groups map[kin.AgentID]supervisor.Group, running map[kin.AgentID]bool) bool {
	for id, g := range groups {
		if running[id] && strings.HasPrefix(g.Path, dir+"/") {
			return true
		}
	}
	return false
}

// inBackground runs fn as exit handling runs: Close waits for it.
func (run *Runner) inBackground(fn func()) {
	run.exitWG.Add(1)
	go func() {
		defer run.exitWG.Done()
		fn()
	}()
}

// takeBack gives the supervisor a's group or namespace back and reports
// whether a's process is alive in it. What cannot be contained is killed.
func (run *Runner) takeBack(a *kin.Agent, groups map[kin.AgentID]supervisor.Group) bool {
	switch {
	case run.sup.Containment() == supervisor.ContainmentCgroup2:
		g, ok := groups[a.ID]
		if !ok {
			return false
		}
		if _, err := run.sup.Adopt(g.Path); err != nil {
			run.log.Error("adopt", "agent", a.ID, "err", err)
			return false
		}
		return run.sup.PeerInCgroup(a.PID, a.ID) && supervisor.ProcessAlive(a.PID)
	case run.sup.Containment() == supervisor.ContainmentPIDNamespaces:
		// The init of the agent's own PID namespace: what is alive in
		// that namespace is the agent's, so it is taken back whole.
		if err := run.sup.AdoptProcess(a.ID, a.Parent, a.PID); err != nil {
			run.log.Info("not re-adopted", "agent", a.ID, "err", err)
			killLeftover(a) // whatever of it runs outside a namespace of its own
			return false
		}
		return supervisor.ProcessAlive(a.PID)
	}
	killLeftover(a)
	return false
}

// reconcileChunk re-adopts the live agents of as (alive says which) and
// records the others lost, then releases them all from pending. The
// agent.adopted events of the chunk are one transaction; an adopted
// agent's end is handled only after it (its runtime's ready).
func (run *Runner) reconcileChunk(ctx context.Context, as []*kin.Agent, alive []bool) (adopted, lost []*kin.Agent) {
	var rts []*runtime
	for i, a := range as {
		if !alive[i] {
			lost = append(lost, a)
			continue
		}
		rt, err := run.adopt(ctx, a)
		if err != nil {
			run.log.Error("adopt", "agent", a.ID, "err", err)
			lost = append(lost, a)
			continue
		}
		adopted, rts = append(adopted, a), append(rts, rt)
	}
	var superseded []kin.AgentID
	if len(adopted) > 0 {
		err := run.update(ctx, func(tx store.Tx, _ *store.AfterCommit) error {
			superseded = nil
			now := run.now()
			for _, a := range adopted {
				if err := store.AppendEvent(ctx, tx, now, kin.EventAgentAdopted, a.ID, a.Parent, kin.AgentAdoptedData{Agent: a.ID, PID: a.PID}); err != nil {
					return err
				}
				// Marked offline by the fleet while this host's lease had
				// expired: it runs, so it is back.
				if a.State == kin.StateOffline {
					_, gone, err := run.restoreOfflineTx(ctx, tx, a.ID, now)
					if err != nil {
						return err
					}
					if gone {
						superseded = append(superseded, a.ID)
					}
				}
			}
			return nil
		})
		if err != nil {
			run.log.Error("record re-adoptions", "agents", len(adopted), "err", err)
			superseded = nil
		}
	}
	for _, rt := range rts {
		run.markReady(rt)
	}
	for _, a := range adopted {
		run.reconciled(a.ID)
	}
	run.stopSuperseded(superseded) // once adopted: the stop waits on its runtime
	for _, a := range lost {
		run.recordLost(ctx, a, reasonLost)
		run.reconciled(a.ID)
	}
	return adopted, lost
}

// recordLost records that a's process ended unseen (while the daemon was
// down, or while its host was fenced: reason says which): exited, its
// exit status unknown, its result judged on its own, and agent.lost. The
// caller cancels its owned subtree.
func (run *Runner) recordLost(ctx context.Context, a *kin.Agent, reason string) bool {
	var res *outcome
	if a.Result == kin.ResultRunning { // its result is judged on its own: the exit status is lost
		o := run.collectResult(a, run.ctxAgentOf(ctx, a), kin.Exit{Code: -1})
		res = &o
	}
	if _, err := run.recordEnd(ctx, a.ID, kin.StateExited, reason, &kin.Exit{Code: -1}, res, nil); err != nil {
		run.log.Error("record a lost agent", "agent", a.ID, "err", err)
		return false
	}
	run.appendSimple(ctx, kin.EventAgentLost, a, kin.AgentLostData{Agent: a.ID, PID: a.PID})
	run.log.Warn("agent ended unseen", "agent", a.ID, "pid", a.PID, "reason", reason)
	return true
}

// reconciled releases agent id from pending.
func (run *Runner) reconciled(id kin.AgentID) {
	run.rtMu.Lock()
	ch := run.pending[id]
	delete(run.pending, id)
	run.rtMu.Unlock()
	if ch != nil {
		close(ch)
	}
}

// awaitReconciled returns once none of ids is pending: each re-adopted or
// recorded lost by a restart's reconciliation, or ctx is done.
func (run *Runner) awaitReconciled(ctx context.Context, ids ...kin.AgentID) error {
	for _, id := range ids {
		run.rtMu.Lock()
		none, ch := len(run.pending) == 0, run.pending[id]
		run.rtMu.Unlock()
		if none {
			return nil
		}
		if ch == nil {
			continue
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return kin.Errorf(kin.ECodeUnavailable, "agent %d: the restarted daemon has not yet checked its process (%v)", id, ctx.Err())
		}
	}
	return nil
}

// Reconciling reports whether agent id is one a restart's reconciliation
// has not yet checked: the store says it runs, and whether it still does
// is not yet known.
func (run *Runner) Reconciling(id kin.AgentID) bool {
	run.rtMu.Lock()
	defer run.rtMu.Unlock()
	return run.pending[id] != nil
}

// ReconcilingCount is how many agents a restart's reconciliation has not
// yet checked.
func (run *Runner) ReconcilingCount() int {
	run.rtMu.Lock()
	defer run.rtMu.Unlock()
	return len(run.pending)
}

// adopt takes a running agent back: a runtime, its socket, a pidfd watch.
// The runtime's ready is closed by the caller, once the re-adoption is
// recorded: the agent's end is handled after that.
func (run *Runner) adopt(ctx context.Context, a *kin.Agent) (*runtime, error) {
	fd, err := unix.PidfdOpen(a.PID, unix.PIDFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("pidfd_open %d: %w", a.PID, err)
	}
	pidfd := os.NewFile(uintptr(fd), "pidfd")
	rt := &runtime{id: a.ID, adopted: true, ready: make(chan struct{}), grace: time.Duration(a.Grace), ctx: run.ctxAgentOf(ctx, a)}
	run.rtMu.Lock()
	run.runtimes[a.ID] = rt
	run.adopted[a.ID] = pidfd
	run.rtMu.Unlock()
	sock, err := run.listen(a)
	if err != nil {
		run.log.Error("reopen agent socket", "agent", a.ID, "err", err)
	} else {
		rt.sock = sock
	}
	run.reattachLog(a.ID) // its output, waiting in its pipe, goes on into its log
	run.log.Debug("agent re-adopted", "agent", a.ID, "pid", a.PID)
	run.exitWG.Add(1)
	go func() {
		defer run.exitWG.Done()
		if !waitPidfd(pidfd) {
			return // closed by the daemon's shutdown
		}
		run.rtMu.Lock()
		delete(run.adopted, a.ID)
		run.rtMu.Unlock()
		pidfd.Close()
		run.handleExit(a.ID, kin.Exit{Code: -1}) // not our child: no status
	}()
	return rt, nil
}

// waitPidfd blocks (in the netpoller, not on a thread) until the process
// ends; false if the file was closed first.
func waitPidfd(f *os.File) bool {
	rc, err := f.SyscallConn()
	if err != nil {
		return false
	}
	err = rc.Read(func(fd uintptr) bool {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, _ := unix.Poll(fds, 0)
		return n > 0
	})
	return err == nil
}

// killLeftover kills an agent process left by an earlier daemon when no
// cgroup can hold it, if the pid still is that agent's (its environment
// says so: pids are recycled).
func killLeftover(a *kin.Agent) {
	env, err := os.ReadFile("/proc/" + strconv.Itoa(a.PID) + "/environ")
	if err != nil || !bytes.Contains(env, []byte("\x00KIN_AGENT_ID="+a.ID.String()+"\x00")) && !bytes.HasPrefix(env, []byte("KIN_AGENT_ID="+a.ID.String()+"\x00")) {
		return
	}
	syscall.Kill(-a.PID, syscall.SIGKILL)
	syscall.Kill(a.PID, syscall.SIGKILL)
}

// appendSimple appends one event in its own transaction.
func (run *Runner) appendSimple(ctx context.Context, typ string, a *kin.Agent, data any) {
	err := run.update(ctx, func(tx store.Tx, _ *store.AfterCommit) error {
		return store.AppendEvent(ctx, tx, run.now(), typ, a.ID, a.Parent, data)
	})
	if err != nil {
		run.log.Error("event", "type", typ, "agent", a.ID, "err", err)
	}
}

// stopAgents stops every running agent at shutdown: every independent
// subtree at once, each with its grace, all within the shutdown's deadline
// (Shutdown; graceWithin and killAtDeadline). The subtrees are planned
// first, parents before children (ids grow down the tree), so that a
// parent's cancellation claims its owned descendants; then every agent is
// marked stopping in one transaction and every socket closed (so the last
// subtree's grace does not begin after the others' bookkeeping), then the
// subtrees are signalled and waited for together, and their records,
// written as each finishes, share the store's group commits.
func (run *Runner) stopAgents(ctx context.Context) {
	run.rtMu.Lock()
	ids := make([]kin.AgentID, 0, len(run.runtimes))
	for id := range run.runtimes {
		ids = append(ids, id)
	}
	run.rtMu.Unlock()
	slices.Sort(ids)
	var plans []*cancellation
	for _, id := range ids {
		rt := run.runtimeOf(id)
		if rt == nil {
			continue
		}
		run.rtMu.Lock()
		claimed := rt.ending
		run.rtMu.Unlock()
		if claimed {
			continue
		}
		c, err := run.planCancel(ctx, cancelParams{Root: id, Reason: reasonShutdown, IncludeRoot: true})
		if err != nil {
			run.log.Error("stop at shutdown", "agent", id, "err", err)
			continue
		}
		plans = append(plans, c)
	}
	if len(plans) == 0 {
		return
	}
	run.log.Info("stopping every agent", "subtrees", len(plans), "agents", len(ids), "deadline", run.cfg.ShutdownTimeout.String())
	socks, err := run.silence(ctx, plans...)
	if err != nil {
		run.log.Error("stop at shutdown: mark the agents stopping", "err", err)
	}
	// The agents whose processes die of the SIGTERM are recorded, and
	// their groups removed, while the graces run: after them, only what
	// had to be killed is left to record.
	gone := run.newGoneEnds(plans)
	var wg sync.WaitGroup
	for _, c := range plans {
		wg.Go(func() {
			if _, err := run.stopAndRecord(ctx, c); err != nil {
				run.log.Error("stop at shutdown", "agent", c.Root, "err", err)
			}
		})
	}
	wg.Wait()
	gone.close()
	// Their sockets' files: after the stops, which they would slow (no
	// agent starts from now on, so no name is taken meanwhile); none on a
	// served agent/, whose nodes end with the mount at Close.
	if run.served == nil {
		agentsock.UnlinkAll(socks)
	}
}
