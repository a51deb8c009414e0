package runner

import (
	"context"
	"encoding/json"
	"math"
	"slices"
	"time"

	"github.com/kin-agents/kin/kin"
)

// The runner's part of the fleet (issue 24). An owned subtree may span
// hosts: the host that cancels it marks every agent of it stopping in one
// transaction and asks each other host, by an EventFleetCancel in that
// transaction, to cancel its own (silence). Each host learns of the event
// from the store (the registry's FollowStore hands it here) and runs seed
// 001's sequence on its agents, recording each. A host that was down when
// the event was committed finds its agents stopping when it restarts, and
// its reconciliation finishes their cancellation.

// FollowedTypes are the events the runner acts on when another host
// commits them.
var FollowedTypes = []string{kin.EventFleetCancel, kin.EventSpawnPlaced}

// Followed is handed each event of FollowedTypes committed to the store,
// by any host: a fleet.cancel for this host cancels the agents it names
// (each with its owned subtree here), and a spawn.placed for this host
// starts the agent it names (place.go), in the background.
func (run *Runner) Followed(e kin.Event) {
	if run.cfg.Host == "" {
		return
	}
	if e.Type == kin.EventSpawnPlaced {
		run.followPlaced(e)
		return
	}
	if e.Type != kin.EventFleetCancel {
		return
	}
	var d kin.FleetCancelData
	if err := json.Unmarshal(e.Data, &d); err != nil {
		run.log.Error("fleet cancel: bad event", "seq", e.Seq, "err", err)
		return
	}
	if d.Host != run.cfg.Host || len(d.Agents) == 0 {
		return
	}
	// The top-most of the named agents: each one's subtree holds the rest
	// of this host's agents under it.
	named := map[kin.AgentID]bool{}
	for _, id := range d.Agents {
		named[id] = true
	}
	var tops []kin.AgentID
	for _, id := range d.Agents {
		if !named[run.lineage.Parent(id)] {
			tops = append(tops, id)
		}
	}
	// An agent another cancellation already claimed (a host between two
	// of this host's agents asked for the lower one too) is left to it.
	run.rtMu.Lock()
	tops = slices.DeleteFunc(tops, func(id kin.AgentID) bool {
		rt := run.runtimes[id]
		if rt == nil || rt.ending {
			return true
		}
		rt.ending = true // claimed here: cancelTree's root
		return false
	})
	run.rtMu.Unlock()
	slices.Sort(tops)
	run.log.Info("fleet cancel", "root", d.Root, "agents", len(d.Agents), "subtrees", len(tops), "reason", d.Reason)
	// Added under rtMu while not shutting down: before Close waits for
	// exitWG. A shutdown stops every agent of this host anyway (or, with
	// --leave-running, leaves them stopping for the next daemon to finish).
	run.rtMu.Lock()
	if run.shuttingDown {
		run.rtMu.Unlock()
		return
	}
	run.exitWG.Add(len(tops))
	run.rtMu.Unlock()
	for _, id := range tops {
		go func() {
			defer run.exitWG.Done()
			p := cancelParams{Root: id, Reason: d.Reason, Grace: d.Grace, IncludeRoot: true, ParentEnded: true}
			if _, err := run.cancelTree(context.Background(), p); err != nil {
				run.log.Error("fleet cancel", "agent", id, "err", err)
			}
		}()
	}
}

// followPlaced starts, in the background, the agent a spawn.placed names
// when it is this host's.
func (run *Runner) followPlaced(e kin.Event) {
	var d kin.SpawnPlacedData
	if err := json.Unmarshal(e.Data, &d); err != nil {
		run.log.Error("spawn placed: bad event", "seq", e.Seq, "err", err)
		return
	}
	if d.Host != run.cfg.Host {
		return
	}
	run.rtMu.Lock()
	if run.shuttingDown || run.placing[d.Agent] {
		run.rtMu.Unlock()
		return // its spawner withdraws it; or it is being started
	}
	run.placing[d.Agent] = true
	run.exitWG.Add(1)
	run.rtMu.Unlock()
	go func() {
		defer run.exitWG.Done()
		run.startPlaced(d.Agent) // then its pid or its end is recorded: another start returns at once
		run.rtMu.Lock()
		delete(run.placing, d.Agent)
		run.rtMu.Unlock()
	}()
}

// resumePlaced, at start, starts the agents placed on this host whose
// spawn.placed came while this daemon was down (or stopping): the follower
// reads from the log's size at start on. Only those placed within
// placeTimeout, which their spawners may still be waiting for; startPlaced
// skips any withdrawn, started or ended meanwhile, and the write lock
// orders a start against its spawner's withdrawal as for any placement.
func (run *Runner) resumePlaced(ctx context.Context) {
	if run.cfg.Host == "" {
		return
	}
	// Only in a fleet of several hosts (a lone host places nothing on
	// itself this way): the read below scans the log back for its type.
	if hosts, err := run.store.HostList(ctx); err != nil || len(hosts) < 2 {
		return
	}
	evs, err := run.store.EventList(ctx, kin.EventFilter{Types: []string{kin.EventSpawnPlaced}, Before: math.MaxInt64, Limit: resumePlacedMax})
	if err != nil {
		run.log.Warn("placement: resume what was placed here while this daemon was down", "err", err)
		return
	}
	since := run.now().Add(-placeTimeout)
	for _, e := range evs {
		if e.Time.After(since) {
			run.followPlaced(e)
		}
	}
}

// resumePlacedMax bounds the spawn.placed events read at start (the last
// ones, of every host).
const resumePlacedMax = 1000

// remoteSlack is how long, past the grace, a cancellation waits for the
// other hosts of the fleet to record their agents of it.
const remoteSlack = 10 * time.Second

// awaitRemote waits until every agent of c on another host is recorded
// ended (each host records its own), at most the grace and remoteSlack,
// and returns them as the store has them: ended, or still stopping where
// a host did not answer in time (its daemon down or cut off: it finishes
// them when it comes back, or the fleet marks them offline).
func (run *Runner) awaitRemote(ctx context.Context, c *cancellation) []*kin.Agent {
	var ids []kin.AgentID
	grace := time.Duration(0)
	for _, as := range c.remote {
		for _, a := range as {
			ids = append(ids, a.ID)
			grace = max(grace, time.Duration(a.Grace))
		}
	}
	if c.Grace != nil {
		grace = time.Duration(*c.Grace)
	}
	slices.Sort(ids)
	deadline := time.NewTimer(run.graceWithin(grace) + remoteSlack)
	defer deadline.Stop()
	for {
		wake := run.store.Wait()
		got, err := run.store.AgentListByIDs(ctx, ids)
		if err != nil {
			run.log.Error("fleet cancel: read the other hosts' agents", "root", c.Root, "err", err)
			return nil
		}
		ended := 0
		for _, a := range got {
			if a.State.Terminal() {
				ended++
			}
		}
		if ended == len(ids) {
			return got
		}
		select {
		case <-wake:
		case <-time.After(time.Second): // a notification a driver lost
		case <-deadline.C:
			run.log.Warn("fleet cancel: other hosts have not recorded every agent yet", "root", c.Root, "agents", len(ids), "ended", ended)
			return got
		case <-ctx.Done():
			return got
		}
	}
}
