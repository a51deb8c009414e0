package registry

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/kin"
)

// Following the store (issue 24). The lineage and the governor's profile
// are caches of the store that this daemon changes after its own commits.
// In a fleet, other hosts commit to the same store: FollowStore reads the
// event log as it grows and applies what those commits changed, so that
// `kin tree`, the governor's rules and every check that reads the caches
// see the whole fleet. Applying this daemon's own events again changes
// nothing (the lineage's Add of a known agent is a no-op; the profile is
// re-read from the store).

// followTypes are the events that change a cache (the lineage, the
// governor's profile, the permission cache's layers and escalations).
var followTypes = []string{kin.EventAgentRegistered, kin.EventGovernorChanged, kin.EventAgentPromoted, kin.EventSpawnEscalated}

// FollowStore applies the events committed after seq from on to the
// caches, and hands the events of types others to fn (the runner's part of
// the fleet), until the daemon closes. It logs a failed read and tries
// again at the next commit.
func (r *Registry) FollowStore(from int64, log *slog.Logger, others []string, fn func(kin.Event)) {
	ctx := context.Background()
	r.followLog.Store(log)
	r.followed.Store(from)
	types := append(slices.Clone(followTypes), others...)
	here, _ := r.st.(store.AppendedHere)
	// Woken by this daemon's commits of those types only (a model call's
	// commit wakes nobody here), by every other host's.
	wait := store.WaitFor(r.st, types, false)
	for {
		wake := wait()
		r.followHold.RLock()
		// The log's size before the read: every event up to it is
		// committed, so the next read starts there even when none of them
		// is of these types (else each wake would read again every event
		// of other types since the last of these).
		size, err := r.st.EventLastSeq(ctx)
		var evs []kin.Event
		if err == nil {
			evs, err = r.st.EventList(ctx, kin.EventFilter{Since: from, Types: types, Limit: 1000})
		}
		if err != nil {
			log.Error("follow the store", "since", from, "err", err)
			size = 0
		}
		governor := false
		for _, e := range evs {
			switch e.Type {
			case kin.EventAgentRegistered:
				if err := r.learnRegistration(ctx, e, here); err != nil {
					log.Error("follow the store: a registration's policy", "agent", e.Agent, "err", err)
				}
			case kin.EventGovernorChanged:
				governor = true
			case kin.EventAgentPromoted:
				// A stage changed (on any host): the permission cache's
				// layer for it is re-read, so that what this host admits,
				// sandboxes and answers under it from now on has its new
				// stage.
				if r.auth != nil {
					if err := r.auth.Learn(ctx, e.Agent); err != nil {
						log.Error("follow the store: a promotion", "agent", e.Agent, "err", err)
					}
				}
			case kin.EventSpawnEscalated:
				// The escalated agent's permissions go through its
				// asker's chain on every host (seed 002 §4.1).
				var d kin.SpawnEscalatedData
				if err := json.Unmarshal(e.Data, &d); err != nil {
					log.Error("follow the store: spawn.escalated", "seq", e.Seq, "err", err)
				} else if d.Child != 0 && d.RequestedBy != 0 && r.auth != nil {
					r.auth.Escalated(d.Child, d.RequestedBy)
				}
			default:
				fn(e)
			}
			from = e.Seq
		}
		r.followed.Store(from)
		if governor {
			if err := r.loadGovernor(ctx); err != nil {
				log.Error("follow the store: governor", "err", err)
			}
		}
		if len(evs) == 1000 {
			r.followHold.RUnlock()
			continue // more are stored
		}
		from = max(from, size)
		r.followed.Store(from)
		r.followHold.RUnlock()
		select {
		case <-wake:
		case <-r.closing:
			return
		case <-time.After(followEvery):
			// A wake-up a driver missed (PostgreSQL's listener
			// reconnecting) is made good here.
		}
	}
}

// learnRegistration adds an agent registration e (of any host) to the
// lineage, with its policy where another host registered it (the error:
// that policy's read; the lineage has the agent whatever it says).
func (r *Registry) learnRegistration(ctx context.Context, e kin.Event, here store.AppendedHere) error {
	// Registered by another host: not in the lineage, and not appended by
	// this daemon's own commits (whose registering goroutine may not have
	// added it yet: its admission is cached after its commit, and reading
	// the chain again here was a chain read for every other registration).
	foreign := !r.lin.Has(e.Agent) && (here == nil || !here.AppendedHere(e.Seq))
	r.lin.Add(e.Agent, e.Parent)
	if foreign && r.auth != nil {
		// Its stage and policy, for what this host answers about it (kin
		// authorize, kin show) and admits under it.
		return r.auth.Learn(ctx, e.Agent)
	}
	return nil
}

// CatchUp adds to the lineage, now, the agents registered in the store
// since what FollowStore last applied: the registrations of other hosts
// that its next wake-up would bring (a notification on its way, or missed
// until followEvery). A cancellation plans from the lineage: without this
// a child another host registered a moment before its parent died was left
// running (issue 24's cascade across hosts); the forest is read from it
// too. Where FollowStore does not run (a store this daemon alone writes),
// there is nothing to catch up. The error is the store's: a registration
// whose policy cannot be read is in the lineage all the same, and logged
// as FollowStore logs it.
func (r *Registry) CatchUp(ctx context.Context) error {
	from := r.followed.Load()
	if from < 0 {
		return nil
	}
	log := r.followLog.Load() // set before followed
	here, _ := r.st.(store.AppendedHere)
	for {
		evs, err := r.st.EventList(ctx, kin.EventFilter{Since: from, Types: []string{kin.EventAgentRegistered}, Limit: 1000})
		if err != nil {
			return err
		}
		for _, e := range evs {
			if err := r.learnRegistration(ctx, e, here); err != nil {
				log.Error("catch up with the store: a registration's policy", "agent", e.Agent, "err", err)
			}
			from = e.Seq
		}
		if len(evs) < 1000 {
			return nil
		}
	}
}

// HoldFollowing keeps FollowStore from applying what it reads until
// release is called: for tests of what a host does before it has seen
// another host's commit.
func (r *Registry) HoldFollowing() (release func()) {
	r.followHold.Lock()
	var once sync.Once
	return func() { once.Do(r.followHold.Unlock) }
}

// followEvery bounds how long a commit of another host can go unseen.
const followEvery = 5 * time.Second
