package runner

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/internal/supervisor"
	"github.com/kin-agents/kin/kin"
)

// While the daemon is down, agents keep running: nothing can supervise them,
// and killing a tree because its supervisor restarted would be worse. When
// the daemon comes back it reconciles before it serves anyone:
//
//   - an agent the store says is running whose process is still alive in
//     its cgroup is re-adopted: supervised again (its end is noticed through
//     a pidfd, though its exit status cannot be collected: it is no longer
//     the daemon's child), its socket reopened;
//   - one whose process is gone is recorded "lost" (state exited, status
//     unknown), and its owned subtree is cancelled as for any parent death;
//   - groups under kin's root cgroup that belong to no running agent are
//     killed.
//
// So no process of an agent is left running unaccounted for. With PID
// namespaces (no writable cgroup v2) an agent's init is found by its pid,
// checked to be the init of a namespace of its own whose environment names
// the agent, and re-adopted with its namespace. With process groups nothing
// can be re-adopted: leftover agent processes are found by their pid and
// KIN_AGENT_ID and killed, and recorded lost.

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

// reconcile runs once at start, before the daemon serves.
func (run *Runner) reconcile(ctx context.Context) error {
	var running []*kin.Agent
	for _, st := range []kin.State{kin.StateRegistered, kin.StateActive, kin.StateStale, kin.StateOffline, kin.StateSuspended, kin.StateStopping} {
		as, err := run.store.AgentList(ctx, kin.AgentFilter{State: st})
		if err != nil {
			return err
		}
		for _, a := range as {
			if a.Running() {
				running = append(running, a)
			}
		}
	}
	groups := map[kin.AgentID]supervisor.Group{}
	cg := run.sup.Containment() == supervisor.ContainmentCgroup2
	if cg {
		found, err := run.sup.Discover()
		if err != nil {
			return fmt.Errorf("discover agent cgroups: %w", err)
		}
		for _, g := range found {
			groups[g.ID] = g
		}
	}
	known := map[kin.AgentID]bool{}
	var lost, unfinished []*kin.Agent
	for _, a := range running {
		known[a.ID] = true
		alive := false
		if g, ok := groups[a.ID]; ok {
			if _, err := run.sup.Adopt(g.Path); err != nil {
				run.log.Error("adopt", "agent", a.ID, "err", err)
			} else {
				alive = run.sup.PeerInCgroup(a.PID, a.ID) && supervisor.ProcessAlive(a.PID)
			}
		} else if run.sup.Containment() == supervisor.ContainmentPIDNamespaces {
			// The init of the agent's own PID namespace: what is alive in
			// that namespace is the agent's, so it is taken back whole.
			if err := run.sup.AdoptProcess(a.ID, a.Parent, a.PID); err == nil {
				alive = supervisor.ProcessAlive(a.PID)
			} else {
				run.log.Info("not re-adopted", "agent", a.ID, "err", err)
				killLeftover(a) // whatever of it runs outside a namespace of its own
			}
		} else if !cg {
			killLeftover(a)
		}
		if !alive {
			lost = append(lost, a)
			continue
		}
		if err := run.adopt(ctx, a); err != nil {
			run.log.Error("adopt", "agent", a.ID, "err", err)
			lost = append(lost, a)
			continue
		}
		if a.State == kin.StateStopping {
			unfinished = append(unfinished, a)
		}
	}
	for _, a := range lost {
		var res *outcome
		if a.Result == kin.ResultRunning { // its result is judged on its own: the exit status is lost
			o := run.collectResult(a, run.ctxAgentOf(ctx, a), kin.Exit{Code: -1})
			res = &o
		}
		if _, err := run.recordEnd(ctx, a.ID, kin.StateExited, reasonLost, &kin.Exit{Code: -1}, res); err != nil {
			return err
		}
		run.appendSimple(ctx, kin.EventAgentLost, a, kin.AgentLostData{Agent: a.ID, PID: a.PID})
		run.log.Warn("agent lost while the daemon was down", "agent", a.ID, "pid", a.PID)
	}
	// Parent death applies to what happened while the daemon was down.
	for _, a := range lost {
		if _, err := run.cancelTree(ctx, cancelParams{Root: a.ID, Reason: reasonParentDead}); err != nil {
			run.log.Error("cancel children of a lost agent", "agent", a.ID, "err", err)
		}
	}
	// A cancellation the old daemon had begun is finished.
	for _, a := range unfinished {
		if _, err := run.cancelTree(ctx, cancelParams{Root: a.ID, Reason: reasonStopped, IncludeRoot: true}); err != nil {
			run.log.Error("finish stop", "agent", a.ID, "err", err)
		}
	}
	// Groups of no running agent: kill them.
	for id, g := range groups {
		if known[id] {
			continue
		}
		if _, err := run.sup.Adopt(g.Path); err == nil {
			if err := run.sup.Kill(ctx, id); err != nil && !errors.Is(err, supervisor.ErrUnknownAgent) {
				run.log.Error("kill stray group", "path", g.Path, "err", err)
			}
		}
	}
	return nil
}

// adopt takes a running agent back: a runtime, its socket, a pidfd watch.
func (run *Runner) adopt(ctx context.Context, a *kin.Agent) error {
	fd, err := unix.PidfdOpen(a.PID, unix.PIDFD_NONBLOCK)
	if err != nil {
		return fmt.Errorf("pidfd_open %d: %w", a.PID, err)
	}
	pidfd := os.NewFile(uintptr(fd), "pidfd")
	rt := &runtime{id: a.ID, adopted: true, ready: make(chan struct{}), ctx: run.ctxAgentOf(ctx, a)}
	run.rtMu.Lock()
	run.runtimes[a.ID] = rt
	run.adopted[a.ID] = pidfd
	run.rtMu.Unlock()
	defer close(rt.ready)
	sock, err := run.socks.Listen(a, run.agentCredential(a.ID))
	if err != nil {
		run.log.Error("reopen agent socket", "agent", a.ID, "err", err)
	} else {
		rt.sock = sock
	}
	run.reattachLog(a.ID) // its output, waiting in its pipe, goes on into its log
	run.appendSimple(ctx, kin.EventAgentAdopted, a, kin.AgentAdoptedData{Agent: a.ID, PID: a.PID})
	run.log.Info("agent re-adopted", "agent", a.ID, "pid", a.PID)
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
	return nil
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

// stopAgents stops every running agent at shutdown (each with its grace).
func (run *Runner) stopAgents(ctx context.Context) {
	run.rtMu.Lock()
	ids := make([]kin.AgentID, 0, len(run.runtimes))
	for id := range run.runtimes {
		ids = append(ids, id)
	}
	run.rtMu.Unlock()
	// Parents first (ids grow down the tree): a parent's cancellation covers
	// its owned descendants, which are then skipped.
	slices.Sort(ids)
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
		if _, err := run.cancelTree(ctx, cancelParams{Root: id, Reason: reasonShutdown, IncludeRoot: true}); err != nil {
			run.log.Error("stop at shutdown", "agent", id, "err", err)
		}
	}
}
