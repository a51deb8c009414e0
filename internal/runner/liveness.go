package runner

import (
	"context"
	"time"

	"github.com/kin-agents/kin/internal/caller"
	"github.com/kin-agents/kin/internal/quota"
	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/kin"
)

// Liveness (seed 002 §5): registered -> active on the first heartbeat;
// active -> stale after one missed window; stale -> active when heartbeats
// resume; -> offline after OfflineAfter missed windows (an alert to the
// parent); offline -> terminated when the parent or operator confirms
// (kin terminate). Only agents that have heartbeated are watched: a
// process that never heartbeats stays "registered" while it runs.

// Heartbeat records that an agent is alive, with its cursor.
func (run *Runner) Heartbeat(ctx context.Context, req kin.HeartbeatRequest) (*kin.Agent, error) {
	c := caller.Of(ctx)
	id := req.ID
	if id == 0 {
		if !c.Operator() && c.Refused == "" {
			id = c.Agent
		} else if c.Refused == "" {
			return nil, kin.Errorf(kin.ECodeInvalid, "the operator heartbeats on behalf of an agent: name it (--id)")
		}
	}
	if c.Agent != 0 && id != c.Agent {
		return nil, kin.Errorf(kin.ECodeForbidden, "agent %d may heartbeat only for itself", c.Agent)
	}
	if err := run.authorize(ctx, id, true); err != nil {
		return nil, err
	}
	if len(req.Cursor) > kin.MaxCursorLen {
		return nil, kin.Errorf(kin.ECodeInvalid, "cursor is %d bytes long; at most %d are allowed", len(req.Cursor), kin.MaxCursorLen)
	}
	for i := 0; i < len(req.Cursor); i++ {
		if req.Cursor[i] < 0x20 || req.Cursor[i] == 0x7f {
			return nil, kin.Errorf(kin.ECodeInvalid, "cursor has a control character at byte %d", i)
		}
	}
	// A heartbeat adds nothing to the store: its own bucket only, so that
	// a large tree's heartbeats never empty its ancestors'.
	if err := run.quota.AllowOwn(ctx, quota.Reports); err != nil {
		return nil, err
	}
	var out *kin.Agent
	var refused error
	var prev, now time.Time // the previous heartbeat and this one
	err := run.update(ctx, func(tx store.Tx, _ *store.AfterCommit) error {
		out, refused, prev = nil, nil, time.Time{}
		a, err := tx.AgentGetByID(ctx, id)
		if err != nil {
			return err
		}
		if a.State == kin.StateOffline {
			// seed 002: offline -> terminated, when the parent or the operator confirms.
			refused = kin.Errorf(kin.ECodeInvalidTransition, "agent %d is offline: it may have been replaced; its parent or the operator ends it with kin terminate", id)
			return nil
		}
		if a.Status != kin.StatusActive || a.State.Terminal() || a.State == kin.StateStopping || a.State == kin.StateSuspended {
			refused = kin.Errorf(kin.ECodeInvalidTransition, "agent %d is %s/%s: it cannot heartbeat", id, a.Status, a.State)
			return nil
		}
		prev, now = a.LastHeartbeat, run.now()
		p := store.AgentUpdateParams{ID: id, At: now, LastHeartbeat: &now}
		if req.Cursor != "" {
			p.Cursor = &req.Cursor
		}
		if a.State != kin.StateActive {
			active := kin.StateActive
			p.State = &active
			if err := store.AppendEvent(ctx, tx, now, kin.EventAgentState, id, a.Parent, kin.AgentStateData{Agent: id, From: a.State, To: active}); err != nil {
				return err
			}
		}
		if err := tx.AgentUpdate(ctx, p); err != nil {
			return err
		}
		out, err = tx.AgentGetByID(ctx, id)
		return err
	})
	if err != nil {
		return nil, run.agentError(err, id)
	}
	if refused != nil {
		return nil, refused
	}
	run.obs.Heartbeat(prev, now)
	run.ctxw.touch(id) // meta.json shows the last heartbeat
	return out, nil
}

// watchLiveness moves agents that stopped heartbeating to stale and offline,
// and replaces offline ones whose restart policy says so. It ticks at a
// quarter of the profile's window, once a restart's reconciliation has
// checked every agent (reconciled closed): until then the store's states
// of agents not yet checked are not this daemon's to judge.
func (run *Runner) watchLiveness(reconciled <-chan struct{}) {
	defer run.wg.Done()
	select {
	case <-run.closing:
		return
	case <-reconciled:
	}
	for {
		window := time.Duration(run.reg.Profile().Heartbeat.Window)
		t := time.NewTimer(max(window/4, 5*time.Millisecond))
		select {
		case <-run.closing:
			t.Stop()
			return
		case <-t.C:
		}
		run.sweepLiveness(context.Background())
	}
}

func (run *Runner) sweepLiveness(ctx context.Context) {
	prof := run.reg.Profile()
	window := time.Duration(prof.Heartbeat.Window)
	offlineAfter := time.Duration(prof.Heartbeat.OfflineAfter) * window
	var watched []*kin.Agent
	for _, st := range []kin.State{kin.StateActive, kin.StateStale} {
		as, err := run.store.AgentList(ctx, kin.AgentFilter{State: st})
		if err != nil {
			run.log.Error("liveness sweep", "err", err)
			return
		}
		watched = append(watched, as...)
	}
	now := run.now()
	var offline []*kin.Agent
	for _, a := range watched {
		if a.Status != kin.StatusActive || a.LastHeartbeat.IsZero() || !run.ownsAgent(a) {
			continue // another host watches its own agents
		}
		silent := now.Sub(a.LastHeartbeat)
		var to kin.State
		switch {
		case silent > offlineAfter:
			to = kin.StateOffline
		case silent > window && a.State == kin.StateActive:
			to = kin.StateStale
		default:
			continue
		}
		changed := false
		err := run.update(ctx, func(tx store.Tx, _ *store.AfterCommit) error {
			changed = false
			cur, err := tx.AgentGetByID(ctx, a.ID)
			if err != nil {
				return err
			}
			// A heartbeat may have landed since the list was read.
			if cur.State != a.State || !cur.LastHeartbeat.Equal(a.LastHeartbeat) || cur.Status != kin.StatusActive {
				return nil
			}
			if err := setLivenessTx(ctx, tx, cur, to, now, ""); err != nil {
				return err
			}
			changed = true
			return nil
		})
		if err != nil {
			run.log.Error("liveness", "agent", a.ID, "err", err)
			continue
		}
		if changed {
			if to == kin.StateOffline {
				offline = append(offline, a)
			}
		}
	}
	for _, a := range offline {
		if a.Restart != kin.RestartOnFailure && a.Restart != kin.RestartAlways || run.runtimeOf(a.ID) == nil {
			continue
		}
		// Replace it: stop what is left of it, then start a new one from its cursor.
		run.exitWG.Add(1)
		go func() {
			defer run.exitWG.Done()
			if _, err := run.cancelTree(ctx, cancelParams{Root: a.ID, Reason: reasonOffline, IncludeRoot: true, RootState: kin.StateOffline}); err != nil {
				run.log.Error("stop offline agent", "agent", a.ID, "err", err)
				return
			}
			if cur, err := run.store.AgentGetByID(ctx, a.ID); err == nil {
				run.maybeRestart(ctx, cur, reasonOffline)
			}
		}()
	}
}

// setLivenessTx moves a (as read in tx) to state to, with its agent.state
// event, and, to offline, seed 002's alert to its parent (agent.offline):
// the liveness sweep's for an agent that missed its heartbeats (host ""),
// the fleet's for every agent of a host whose lease expired (host: its
// name; the alert says which state the agent had, for its return).
func setLivenessTx(ctx context.Context, tx store.Tx, a *kin.Agent, to kin.State, now time.Time, host string) error {
	if err := tx.AgentUpdate(ctx, store.AgentUpdateParams{ID: a.ID, At: now, State: &to}); err != nil {
		return err
	}
	if err := store.AppendEvent(ctx, tx, now, kin.EventAgentState, a.ID, a.Parent, kin.AgentStateData{Agent: a.ID, From: a.State, To: to}); err != nil {
		return err
	}
	if to != kin.StateOffline {
		return nil
	}
	// seed 002: "Governor alerts the parent orchestrator".
	data := kin.AgentOfflineData{Agent: a.ID, Parent: a.Parent, LastHeartbeat: a.LastHeartbeat, Cursor: a.Cursor}
	if host != "" {
		data.Host, data.From = host, a.State
	}
	return store.AppendEvent(ctx, tx, now, kin.EventAgentOffline, a.ID, a.Parent, data)
}
