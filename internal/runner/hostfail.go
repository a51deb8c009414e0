package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/internal/supervisor"
	"github.com/kin-agents/kin/kin"
)

// Host failure and partition (issue 24; docs/ARCHITECTURE.md, "The fleet:
// hosts, leases, failure and fencing"):
//
//   - every host watches the fleet (WatchFleet): a host whose lease expired
//     (not released: a clean stop releases it) has its live agents marked
//     offline, each with seed 002's alert to its parent, in one
//     transaction per dead host that reads the lease and the agents again,
//     so that several hosts doing it at once mark each agent once. Their
//     owned descendants on other hosts run on: the parent decides (seed
//     002 §5.2: it reads the last cursor and spawns a replacement, or
//     terminates);
//   - a host restarted on its home re-adopts what still runs (reconcile),
//     and an agent the fleet marked offline goes back to the state it had;
//   - a host cut off from the store fences itself (Fence, called by the
//     hosts package fence-after past its last renewal): it stops (or
//     freezes) every agent it runs without touching the store, and when
//     a renewal succeeds again (Rejoin) it records what ended meanwhile,
//     thaws what it froze and brings back what the fleet marked offline.

// Fence modes (kin serve --fence-mode).
const (
	FenceStop   = "stop"
	FenceFreeze = "freeze"
)

// reasonFenced is the end reason of an agent its host stopped while cut off
// from the store.
const reasonFenced = "fenced"

// fenceState is what a fence did, for the rejoin (under Runner.fenceMu).
type fenceState struct {
	active bool
	mode   string
	lost   bool                 // the host's name was taken: it serves no agent any more
	done   chan struct{}        // closed once the fence's stops or freezes are done
	frozen map[kin.AgentID]bool // freeze mode: the agents it froze
	killed map[kin.AgentID]bool // stop mode: the agents it stopped
}

// WatchFleet watches the fleet's hosts every interval (a third of this
// host's lease) until Close: a host whose lease expired has its agents
// marked offline.
func (run *Runner) WatchFleet(every time.Duration) {
	if run.cfg.Host == "" {
		return
	}
	run.wg.Add(1)
	go func() {
		defer run.wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-run.closing:
				return
			case <-t.C:
			}
			if run.Fenced() {
				continue // cut off: the store is not ours to judge the fleet by
			}
			run.sweepHosts(context.Background())
		}
	}()
}

// sweepHosts marks offline the agents of every host whose lease expired.
func (run *Runner) sweepHosts(ctx context.Context) {
	rows, err := run.store.HostList(ctx)
	if err != nil {
		run.log.Error("fleet watch", "err", err)
		return
	}
	now := run.now()
	var dead []store.HostRow
	for _, h := range rows {
		if h.Name != run.cfg.Host && leaseExpired(h, now) && h.Agents > 0 {
			dead = append(dead, h)
		}
	}
	if len(dead) == 0 {
		return
	}
	// Which of them still have agents to mark (their live agents may all
	// be offline already): read outside a transaction, so a dead host
	// whose agents are all marked costs no write transaction per sweep.
	markable := map[string]bool{}
	for _, st := range offlineStates {
		as, err := run.store.AgentList(ctx, kin.AgentFilter{State: st, Status: kin.StatusActive})
		if err != nil {
			run.log.Error("fleet watch", "err", err)
			return
		}
		for _, a := range as {
			markable[a.Host] = true
		}
	}
	for _, h := range dead {
		if !markable[h.Name] {
			continue
		}
		marked, err := run.markHostOffline(ctx, h.Name)
		if err != nil {
			run.log.Error("fleet watch: mark a dead host's agents offline", "host", h.Name, "err", err)
			continue
		}
		if len(marked) > 0 {
			run.log.Warn("host lease expired: its agents are offline", "host", h.Name, "agents", len(marked),
				"lease_until", h.LeaseUntil.Format(time.RFC3339Nano))
			run.cancelOrphansOf(ctx, h.Name, marked)
		}
	}
}

// cancelOrphansOf cancels, when the governor's profile says host_loss
// cancel, the owned children on other hosts of the agents the fleet just
// marked offline with their dead host (each with its owned subtree, seed
// 001's sequence, end reason parent_offline), so that no owned subtree
// runs on without a supervised parent. Only the host that marked them
// (one transaction decides which) does it. With host_loss run (the
// default) their parents decide (seed 002 §5.2).
func (run *Runner) cancelOrphansOf(ctx context.Context, dead string, marked []kin.AgentID) {
	if run.reg == nil || run.reg.Profile().HostLoss != kin.HostLossCancel {
		return
	}
	// Their children in one read (a read per offline agent was as many
	// reads as the dead host ran agents).
	kids, err := run.store.AgentListByParents(ctx, marked)
	if err != nil {
		run.log.Error("host loss: read the children of the offline agents", "host", dead, "agents", len(marked), "err", err)
		return
	}
	for _, c := range kids {
		if c.Host == dead || c.Life == kin.LifeDetached || !c.Running() || c.State.Terminal() {
			continue
		}
		run.log.Warn("host loss: cancelling an owned child whose parent's host died", "agent", c.ID, "host", c.Host, "parent", c.Parent, "dead_host", dead)
		run.inBackground(func() {
			if _, err := run.cancelTree(context.Background(), cancelParams{Root: c.ID, Reason: reasonParentOffline, IncludeRoot: true, ParentEnded: true}); err != nil {
				run.log.Error("host loss: cancel an owned child of an offline agent", "agent", c.ID, "err", err)
			}
		})
	}
}

// leaseExpired reports whether h's lease ran out unrenewed: not released
// (a clean stop, LeaseUntil zero) and past.
func leaseExpired(h store.HostRow, now time.Time) bool {
	return !h.LeaseUntil.IsZero() && h.LeaseUntil.Before(now)
}

// offlineStates are the states the fleet marks offline when an agent's host
// dies: those of an agent that runs on its own. A suspended one stays
// suspended (frozen, it does nothing), a stopping one is its host's to
// finish when it returns.
var offlineStates = []kin.State{kin.StateRegistered, kin.StateActive, kin.StateStale}

// markHostOffline marks offline, in one transaction, every live agent of
// host whose lease has expired, each with agent.state and agent.offline
// (addressed to its parent). It reads the lease and the agents inside the
// transaction, so a host that came back, or another host that did it
// first, leaves nothing to do. It returns the agents it marked.
func (run *Runner) markHostOffline(ctx context.Context, host string) ([]kin.AgentID, error) {
	var marked []kin.AgentID
	err := run.update(ctx, func(tx store.Tx, _ *store.AfterCommit) error {
		marked = nil
		rows, err := tx.HostList(ctx)
		if err != nil {
			return err
		}
		now := run.now()
		i := slices.IndexFunc(rows, func(h store.HostRow) bool { return h.Name == host })
		if i < 0 || !leaseExpired(rows[i], now) {
			return nil
		}
		for _, st := range offlineStates {
			as, err := tx.AgentList(ctx, kin.AgentFilter{State: st, Status: kin.StatusActive})
			if err != nil {
				return err
			}
			for _, a := range as {
				if a.Host != host {
					continue
				}
				if err := setLivenessTx(ctx, tx, a, kin.StateOffline, now, host); err != nil {
					return err
				}
				marked = append(marked, a.ID)
			}
		}
		return nil
	})
	return marked, err
}

// restoreOfflineTx brings back an agent the fleet marked offline because
// its host's lease had expired, now that its host holds its lease again
// and runs it: to the state it had, with an agent.state event. An agent
// offline for missed heartbeats stays offline (seed 002: its parent or the
// operator ends it). It reports whether it did, and whether the agent was
// superseded instead: another agent took its role's cardinality slot while
// it was offline (registry.Superseded), so it stays offline here and the
// caller stops it (stopSuperseded).
func (run *Runner) restoreOfflineTx(ctx context.Context, tx store.Tx, id kin.AgentID, now time.Time) (restored, superseded bool, err error) {
	cur, err := tx.AgentGetByID(ctx, id)
	if err != nil || cur.State != kin.StateOffline || cur.Status != kin.StatusActive {
		return false, false, err
	}

	// Its last agent.offline (its own: not one of its children's, however
	// many of those came after it).
	evs, err := tx.EventList(ctx, kin.EventFilter{Agent: id, Subject: true, Types: []string{kin.EventAgentOffline}, Before: math.MaxInt64, Limit: 1})
	if err != nil {
		return false, false, err
	}
	var last *kin.AgentOfflineData
	for _, e := range evs {
		var d kin.AgentOfflineData
		if json.Unmarshal(e.Data, &d) == nil {
			last = &d
		}
	}
	if last == nil || last.Host == "" {
		return false, false, nil
	}
	if run.reg != nil {
		if superseded, err = run.reg.Superseded(ctx, tx, cur); err != nil || superseded {
			return false, superseded, err
		}
	}
	to := last.From
	if !slices.Contains(offlineStates, to) {
		to = kin.StateActive
	}
	return true, false, setLivenessTx(ctx, tx, cur, to, now, "")
}

// stopSuperseded stops, in the background, the agents that came back from
// offline to find their cardinality slot taken (restoreOfflineTx): each
// with its owned subtree, seed 001's sequence, end reason superseded.
func (run *Runner) stopSuperseded(ids []kin.AgentID) {
	for _, id := range ids {
		run.log.Warn("an agent back from offline lost its role's slot to a replacement: stopping it", "agent", id)
		run.inBackground(func() {
			if _, err := run.cancelTree(context.Background(), cancelParams{Root: id, Reason: reasonSuperseded, IncludeRoot: true}); err != nil {
				run.log.Error("stop a superseded agent", "agent", id, "err", err)
			}
		})
	}
}

// Fenced reports whether this host is fenced: cut off from the store past
// fence-after, its agents stopped or frozen until it rejoins.
func (run *Runner) Fenced() bool {
	run.fenceMu.Lock()
	defer run.fenceMu.Unlock()
	return run.fence.active || run.fence.lost
}

// refuseFenced is the error for a spawn on a fenced host, nil otherwise.
func (run *Runner) refuseFenced() error {
	run.fenceMu.Lock()
	defer run.fenceMu.Unlock()
	switch {
	case run.fence.lost:
		return kin.Errorf(kin.ECodeUnavailable, "host %s lost its name to another kin serve: it runs no agent; stop it, or give it its own --host-name", run.cfg.Host)
	case run.fence.active:
		return kin.Errorf(kin.ECodeUnavailable, "host %s is fenced: it cannot reach the store and runs no agent until it does", run.cfg.Host)
	}
	return nil
}

// Fence stops (mode stop) or freezes (mode freeze) every agent this host
// runs, because it has been cut off from the store for fence-after: no
// owned subtree may run unsupervised. It never waits on the store: the
// stops are the supervisor's (SIGTERM, each agent's grace, cgroup.kill),
// their ends recorded at the rejoin. It returns at once; the stops go on
// in the background.
func (run *Runner) Fence(mode string) {
	if run.isClosing() {
		return // a shutdown stops them
	}
	run.fenceMu.Lock()
	if run.fence.active && (run.fence.mode == mode || mode == FenceFreeze) {
		run.fenceMu.Unlock()
		return // fenced already (a freeze turns into a stop when the name is lost)
	}
	prev := run.fence.done
	run.fenceMu.Unlock()
	if prev != nil {
		<-prev // an earlier fence's stops or freezes
	}
	run.fenceMu.Lock()
	run.fence = fenceState{active: true, mode: mode, lost: run.fence.lost, done: make(chan struct{}),
		frozen: map[kin.AgentID]bool{}, killed: map[kin.AgentID]bool{}}
	done := run.fence.done
	run.fenceMu.Unlock()

	// Claim every runtime that nothing else is ending: its end is the
	// fence's to record (at the rejoin), not its exit handler's, which
	// would wait on the store. One an exit or a cancellation is ending
	// is stopped too (that cancellation may be waiting on the store to
	// mark it stopping), and recorded by it.
	type target struct {
		id      kin.AgentID
		grace   time.Duration
		rt      *runtime
		claimed bool
	}
	var ts []target
	run.rtMu.Lock()
	for id, rt := range run.runtimes {
		claimed := false
		if mode == FenceStop && !rt.ending {
			rt.ending, claimed = true, true
		}
		ts = append(ts, target{id, rt.grace, rt, claimed})
	}
	run.rtMu.Unlock()
	slices.SortFunc(ts, func(a, b target) int { return int(a.id - b.id) })
	run.log.Error("fencing: cut off from the store past fence-after; every agent of this host is "+map[string]string{FenceStop: "stopped", FenceFreeze: "frozen"}[mode],
		"host", run.cfg.Host, "agents", len(ts), "mode", mode)
	run.inBackground(func() {
		defer close(done)
		ctx := context.Background()
		if mode == FenceFreeze {
			for _, t := range ts {
				if self, _, err := run.sup.Frozen(t.id); err == nil && self {
					continue // frozen already (kin freeze): not the fence's to thaw
				}
				if err := run.sup.Freeze(ctx, t.id, false); err != nil && !errors.Is(err, supervisor.ErrUnknownAgent) {
					run.log.Error("fence: freeze", "agent", t.id, "err", err)
					continue
				}
				run.fenceMu.Lock()
				run.fence.frozen[t.id] = true
				run.fenceMu.Unlock()
			}
			run.log.Error("fenced: agents frozen", "host", run.cfg.Host, "agents", len(ts))
			return
		}
		// Nobody acts as an agent that is being stopped.
		for _, t := range ts {
			if t.rt.sock != nil {
				t.rt.sock.Close()
			}
		}
		var wg sync.WaitGroup
		for _, t := range ts {
			wg.Go(func() {
				if err := run.sup.Stop(ctx, t.id, t.grace); err != nil && !errors.Is(err, supervisor.ErrUnknownAgent) {
					run.log.Error("fence: stop", "agent", t.id, "err", err)
				}
			})
		}
		wg.Wait()
		// Whatever else runs in kin's groups (a start that raced the
		// fence): killed at once.
		if err := run.sup.KillAll(); err != nil && !errors.Is(err, supervisor.ErrClosed) {
			run.log.Error("fence: kill what is left", "err", err)
		}
		run.fenceMu.Lock()
		for _, t := range ts {
			if t.claimed {
				run.fence.killed[t.id] = true
			}
		}
		run.fenceMu.Unlock()
		for _, t := range ts {
			if t.claimed {
				run.removeRuntime(t.id)
			}
		}
		run.log.Error("fenced: agents stopped", "host", run.cfg.Host, "agents", len(ts))
	})
}

// HostLost is called when another home took this host's name: it stops
// every agent it runs, as a fence does, and refuses to run any more.
func (run *Runner) HostLost(err error) {
	run.log.Error("this host's name was taken by another kin serve: stopping every agent and refusing new ones", "host", run.cfg.Host, "err", err)
	run.fenceMu.Lock()
	run.fence.lost = true
	run.fenceMu.Unlock()
	run.Fence(FenceStop)
}

// Rejoin is called when this host's lease is renewed after it had run out
// (fenced: after a fence). It records the ends of the agents the fence
// stopped (and of any whose process ended while the store was out of
// reach), thaws what the fence froze, and brings back the agents the fleet
// marked offline that still run here.
func (run *Runner) Rejoin(fenced bool) {
	if run.isClosing() {
		return
	}
	ctx := context.Background()
	run.fenceMu.Lock()
	fs := run.fence
	if fs.lost {
		run.fenceMu.Unlock()
		return
	}
	run.fenceMu.Unlock()
	if fs.done != nil {
		<-fs.done
	}
	// What the store says runs here.
	var mine []*kin.Agent
	for _, st := range []kin.State{kin.StateRegistered, kin.StateActive, kin.StateStale, kin.StateOffline, kin.StateSuspended, kin.StateStopping} {
		as, err := run.store.AgentList(ctx, kin.AgentFilter{State: st})
		if err != nil {
			run.log.Error("rejoin: read this host's agents", "err", err)
			return
		}
		for _, a := range as {
			if a.Running() && run.ownsAgent(a) && !run.Reconciling(a.ID) {
				mine = append(mine, a)
			}
		}
	}
	slices.SortFunc(mine, func(a, b *kin.Agent) int { return int(a.ID - b.ID) })
	var lost, alive []*kin.Agent
	for _, a := range mine {
		if fs.killed[a.ID] || run.runtimeOf(a.ID) == nil {
			lost = append(lost, a)
		} else {
			alive = append(alive, a)
		}
	}
	// Ends first (parents before children), then the owned subtrees of
	// what ended, as a reconciliation does.
	var ended []kin.AgentID
	for _, a := range lost {
		reason := reasonLost
		if fs.killed[a.ID] {
			reason = reasonFenced
		}
		if run.recordLost(ctx, a, reason) {
			ended = append(ended, a.ID)
		}
	}
	for _, id := range ended {
		run.inBackground(func() {
			if _, err := run.cancelTree(ctx, cancelParams{Root: id, Reason: reasonParentDead}); err != nil {
				run.log.Error("rejoin: cancel the owned subtree of an agent that ended while fenced", "agent", id, "err", err)
			}
		})
	}
	// Thaw what the fence froze.
	for id := range fs.frozen {
		if err := run.sup.Thaw(ctx, id, false); err != nil && !errors.Is(err, supervisor.ErrUnknownAgent) {
			run.log.Error("rejoin: thaw", "agent", id, "err", err)
		}
	}
	// Back from offline: what the fleet marked so while this host's lease
	// had run out, and that runs here.
	restored := 0
	var superseded []kin.AgentID
	if len(alive) > 0 {
		err := run.update(ctx, func(tx store.Tx, _ *store.AfterCommit) error {
			restored, superseded = 0, nil
			now := run.now()
			for _, a := range alive {
				if a.State != kin.StateOffline {
					continue
				}
				ok, gone, err := run.restoreOfflineTx(ctx, tx, a.ID, now)
				if err != nil {
					return err
				}
				if ok {
					restored++
				}
				if gone {
					superseded = append(superseded, a.ID)
				}
			}
			return nil
		})
		if err != nil {
			run.log.Error("rejoin: bring back agents marked offline", "err", err)
			superseded = nil
		}
	}
	run.stopSuperseded(superseded)
	run.fenceMu.Lock()
	if run.fence.done == fs.done {
		run.fence.active = false
	}
	run.fenceMu.Unlock()
	run.log.Warn("rejoined the fleet", "host", run.cfg.Host, "fenced", fenced, "mode", fs.mode,
		"ended_while_fenced", len(ended), "thawed", len(fs.frozen), "back_from_offline", restored)
}

// fenceModes are kin serve --fence-mode's values.
var fenceModes = []string{FenceStop, FenceFreeze}

// CheckFenceMode reports a clear error for a mode that is not one.
func CheckFenceMode(mode string) error {
	if !slices.Contains(fenceModes, mode) {
		return fmt.Errorf("not one of %v", fenceModes)
	}
	return nil
}

// isClosing reports whether Shutdown has begun.
func (run *Runner) isClosing() bool {
	select {
	case <-run.closing:
		return true
	default:
		return false
	}
}
