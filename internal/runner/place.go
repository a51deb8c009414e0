package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/kin"
)

// Placement (issue 24): a spawn may run its agent on another host of the
// fleet (kin.SpawnRequest.Host, or by default its parent's host). The host
// that receives it registers the agent in one transaction with the governor's
// rules, its host set to the placed one, what it runs in its row (command,
// environment, directory, handoff: never in an event), and an
// EventSpawnPlaced naming the host. The placed host's follower hands that
// event here (Followed); it reads the agent and its process spec from the
// store, learns the chain's policies (Authority.Learn), makes the agent's
// key and starts it as any spawn, recording its pid, provided its spawner
// has not withdrawn it meanwhile (checkNotWithdrawn, in the record's
// transaction). The spawner waits (awaitPlaced) for the pid, or the start's
// failure as the placed host recorded it; if the host's lease runs out, or
// placeTimeout passes, it withdraws the agent: recorded failed (end reason
// placement_failed, agent.failed) in a transaction that first checks the
// agent did not start. The write lock orders the two, so either the agent
// runs and is recorded on its host, or it is recorded failed and nothing
// of it runs (a start that loses stops its process at once).

// placeTimeout bounds how long a spawn waits for the placed host to start
// its agent while that host's lease runs.
const placeTimeout = 30 * time.Second

// placeRecheck is how often a spawn waiting on another host reads that
// host's lease (and the agent again, in case a notification was lost).
const placeRecheck = 500 * time.Millisecond

// errWithdrawn is a placed agent's start recorded too late: its spawner
// withdrew it.
var errWithdrawn = kin.Errorf(kin.ECodeUnavailable, "the agent was withdrawn by the host that registered it before it started here")

// checkNotWithdrawn fails with errWithdrawn when agent id ended (its
// spawner recorded it failed) or was started already, in tx.
func checkNotWithdrawn(ctx context.Context, tx store.Tx, id kin.AgentID) error {
	cur, err := tx.AgentGetByID(ctx, id)
	if err != nil {
		return err
	}
	if !cur.EndedAt.IsZero() || cur.PID != 0 {
		return errWithdrawn
	}
	return nil
}

// awaitPlaced waits until the host agent a was placed on has started its
// process and recorded it, and returns the agent as recorded; or returns
// why it did not start, withdrawing it where its host is down or slow.
func (run *Runner) awaitPlaced(ctx context.Context, a *kin.Agent) (*kin.Agent, error) {
	deadline := time.NewTimer(placeTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(placeRecheck)
	defer tick.Stop()
	checkLease := true
	for {
		wake := run.store.Wait()
		// A failed read is tried again (the deadline still holds): the
		// agent may be starting on its host.
		if got, err := run.store.AgentGetByID(ctx, a.ID); err != nil {
			run.log.Warn("placed agent: read it", "agent", a.ID, "err", err)
		} else if out, done, err := run.placedOutcome(ctx, got); done {
			return out, err
		}
		if checkLease {
			checkLease = false
			if why := run.hostDown(ctx, a.Host); why != "" {
				return run.withdraw(ctx, a, kin.ECodeUnavailable, why)
			}
		}
		select {
		case <-wake:
		case <-tick.C:
			checkLease = true
		case <-deadline.C:
			return run.withdraw(ctx, a, kin.ECodeTimeout, fmt.Sprintf("host %q did not start it within %s", a.Host, placeTimeout))
		}
	}
}

// placedOutcome is what a placed agent's record says of its start: done
// once its host recorded its pid (out) or its end (err).
func (run *Runner) placedOutcome(ctx context.Context, got *kin.Agent) (out *kin.Agent, done bool, err error) {
	switch {
	case got.PID != 0:
		return got, true, nil
	case got.EndedAt.IsZero():
		return nil, false, nil
	}
	detail := got.EndReason
	evs, _ := run.store.EventList(ctx, kin.EventFilter{Agent: got.ID, Subject: true, Types: []string{kin.EventAgentFailed}})
	for _, e := range evs {
		var d kin.AgentFailedData
		if json.Unmarshal(e.Data, &d) == nil && d.Detail != "" {
			detail = d.Detail
		}
	}
	if got.EndReason == reasonPlaceFail {
		return nil, true, kin.Errorf(kin.ECodeUnavailable, "agent %d (%s) was not started on host %q: %s; it is recorded failed and nothing of it runs",
			got.ID, got.Name, got.Host, detail)
	}
	return nil, true, kin.Errorf(kin.ECodeInvalid, "agent %d (%s) was registered on host %q but its process could not start: %s",
		got.ID, got.Name, got.Host, detail)
}

// hostDown says why host cannot start an agent now ("" when its lease
// runs).
func (run *Runner) hostDown(ctx context.Context, host string) string {
	hosts, err := run.store.HostList(ctx)
	if err != nil {
		return "" // the store's trouble: the timeout decides
	}
	for _, h := range hosts {
		if h.Name != host {
			continue
		}
		switch {
		case h.LeaseUntil.IsZero():
			return fmt.Sprintf("host %q went down: its daemon stopped", host)
		case !h.Live(run.now()):
			return fmt.Sprintf("host %q went down: its lease expired at %s (its daemon died or lost the store)", host, h.LeaseUntil.UTC().Format(time.RFC3339))
		}
		return ""
	}
	return fmt.Sprintf("host %q left the fleet", host)
}

// withdraw records placed agent a failed (placement_failed) unless its
// host started it or recorded its end first, and returns the outcome.
func (run *Runner) withdraw(ctx context.Context, a *kin.Agent, code kin.ErrorCode, why string) (*kin.Agent, error) {
	now := run.now()
	status, state, reason := kin.StatusTerminated, kin.StateFailed, reasonPlaceFail
	var cur *kin.Agent
	err := run.update(ctx, func(tx store.Tx, _ *store.AfterCommit) error {
		var err error
		if cur, err = tx.AgentGetByID(ctx, a.ID); err != nil {
			return err
		}
		if cur.PID != 0 || !cur.EndedAt.IsZero() {
			return nil // its host was first
		}
		if err := tx.AgentUpdate(ctx, store.AgentUpdateParams{ID: a.ID, At: now, Status: &status, State: &state, EndedAt: &now, EndReason: &reason}); err != nil {
			return err
		}
		cur = nil
		return store.AppendEvent(ctx, tx, now, kin.EventAgentFailed, a.ID, a.Parent, kin.AgentFailedData{Agent: a.ID, Parent: a.Parent, Reason: reason, Detail: why})
	})
	if err != nil {
		return nil, run.storeError(err)
	}
	if cur != nil {
		out, _, err := run.placedOutcome(ctx, cur)
		return out, err
	}
	run.log.Warn("placed agent withdrawn", "agent", a.ID, "host", a.Host, "why", why)
	return nil, kin.Errorf(code, "agent %d (%s) was not started on host %q: %s; it is recorded failed (placement_failed) and nothing of it runs",
		a.ID, a.Name, a.Host, why)
}

// startPlaced starts agent id, which another host registered for this
// one (an EventSpawnPlaced), unless it was withdrawn or started already.
// A start that fails is recorded failed with why, which its spawner
// answers with.
func (run *Runner) startPlaced(id kin.AgentID) {
	ctx := context.Background()
	if err := run.refuseFenced(); err != nil {
		run.log.Warn("placed agent not started", "agent", id, "err", err)
		return // its spawner withdraws it when this host's lease runs out
	}
	a, err := run.store.AgentGetByID(ctx, id)
	if err != nil {
		run.log.Error("placed agent: read it", "agent", id, "err", err)
		return
	}
	if a.PID != 0 || !a.EndedAt.IsZero() || a.Host != run.cfg.Host {
		return
	}
	spec, err := run.store.AgentProcessSpec(ctx, id)
	if err == nil {
		err = run.auth.Learn(ctx, id)
	}
	if err != nil {
		run.failStart(ctx, a, fmt.Errorf("read what it runs: %w", err))
		return
	}
	switch _, err := run.startWithKey(ctx, a, spec, "", nil, true); {
	case errors.Is(err, errWithdrawn):
	case err != nil:
		run.log.Warn("placed agent did not start", "agent", id, "err", err)
	default:
		run.log.Info("placed agent started", "agent", id, "name", a.Name, "by", a.CreatedBy)
	}
}
