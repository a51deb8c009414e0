package runner

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/internal/supervisor"
	"github.com/kin-agents/kin/kin"
)

// stopEnd is an agent a cancellation records, with that cancellation.
type stopEnd struct {
	c *cancellation
	a *kin.Agent
	// exit is how its process ended, where known before the record
	// (recordBeside); nil: its Process's reaped Exit, if any.
	exit *kin.Exit
}

// recordStoppedTx is step 8 of the cancellation in tx: each agent of ends
// recorded as its cancellation ended it (cancelled, or its root's
// RootState, for its Reason), with its agent.child.cancel, agent.stop and
// result events, and its permissions revoked. Agents recorded already (a
// concurrent cancellation of an overlapping subtree) are skipped. It
// returns the agents it recorded, as written. rows: read them whole (a
// caller that gives them out), else only the columns decided on.
func (run *Runner) recordStoppedTx(ctx context.Context, tx store.Tx, now time.Time, ends []stopEnd, rows bool) ([]*kin.Agent, error) {
	ids := make([]kin.AgentID, len(ends))
	for i, e := range ends {
		ids[i] = e.a.ID
	}
	// Their rows in one read (a read per agent was a third of the record's
	// CPU in a 1,000-agent cascade), whole only for a caller that gives
	// them out.
	read := tx.AgentListLeanByIDs
	if rows {
		read = tx.AgentListByIDs
	}
	got, err := read(ctx, ids)
	if err != nil {
		return nil, err
	}
	curs := make(map[kin.AgentID]*kin.Agent, len(got))
	for _, r := range got {
		curs[r.ID] = r
	}
	// The agents that end the same way are updated in one statement each
	// (most often all of them in one); their events, one or more per agent,
	// are appended in the cascade's order.
	type ending struct {
		state         kin.State
		reason        string
		result, ended bool
		exit          kin.Exit
	}
	var endings []ending
	updates := map[ending]*store.AgentUpdateParams{}
	same := map[ending][]kin.AgentID{}
	var done []*kin.Agent
	var reasons []string // in their first agent's order
	revoke := map[string][]kin.AgentID{}
	for _, end := range ends {
		c, a := end.c, end.a
		cur := curs[a.ID]
		if cur == nil {
			return nil, fmt.Errorf("%w: agent %d", store.ErrNotFound, a.ID)
		}
		if cur.State.Terminal() && (cur.PID == 0 || !cur.EndedAt.IsZero()) {
			continue // recorded by someone else (a concurrent cancellation of an overlapping subtree)
		}
		status, state, why := kin.StatusTerminated, kin.StateCancelled, c.Reason
		if a.ID == c.Root && c.RootState != "" {
			state = c.RootState
		}
		p := store.AgentUpdateParams{ID: a.ID, At: now, Status: &status, State: &state, EndReason: &why}
		cancelled := kin.ResultCancelled
		if cur.Result == kin.ResultRunning {
			p.Result = &cancelled
		}
		if cur.PID != 0 && cur.EndedAt.IsZero() {
			p.EndedAt = &now
			exit := kin.Exit{Code: -1}
			if end.exit != nil {
				exit = *end.exit
			} else if rt := run.runtimeOf(a.ID); rt != nil && rt.proc != nil {
				if ex, ok := rt.proc.Exit(); ok {
					exit = exitOf(ex)
				}
			}
			p.Exit = &exit
		}
		e := ending{state: state, reason: why, result: p.Result != nil, ended: p.EndedAt != nil}
		if p.Exit != nil {
			e.exit = *p.Exit
		}
		if updates[e] == nil {
			endings = append(endings, e)
			updates[e] = &p
		}
		same[e] = append(same[e], a.ID)
		if a.ID != c.Root || c.ParentEnded {
			if err := store.AppendEvent(ctx, tx, now, kin.EventChildCancel, a.ID, a.Parent, kin.ChildCancelData{Parent: a.Parent, Child: a.ID, Reason: why}); err != nil {
				return nil, err
			}
		}
		if err := store.AppendEvent(ctx, tx, now, kin.EventAgentStop, a.ID, a.Parent, kin.AgentStopData{Agent: a.ID, Status: string(state)}); err != nil {
			return nil, err
		}
		if p.Result != nil {
			if err := appendResult(ctx, tx, now, a.ID, a.Parent, cancelled, []string{"cancelled: " + why}); err != nil {
				return nil, err
			}
			cur.Result = cancelled
		}
		// What was written, without reading it back.
		cur.Status, cur.State, cur.EndReason, cur.UpdatedAt = status, state, why, now
		if p.EndedAt != nil {
			cur.EndedAt, cur.Exit = now, p.Exit
		}
		done = append(done, cur)
		if revoke[why] == nil {
			reasons = append(reasons, why)
		}
		revoke[why] = append(revoke[why], a.ID)
	}
	for _, e := range endings {
		if err := tx.AgentUpdateMany(ctx, same[e], *updates[e]); err != nil {
			return nil, err
		}
	}
	for _, why := range reasons {
		if err := run.ps.RevokeAgentsTx(ctx, tx, now, revoke[why], "agent stopped: "+why); err != nil {
			return nil, err
		}
	}
	return done, nil
}

// goneEnds records, while a shutdown's graces run, the ends of the agents
// whose processes are gone already, and removes their groups: a root that
// ignores SIGTERM holds its subtree's stop until its grace is over, while
// its children (most often) die of the SIGTERM at once. Without it each
// subtree recorded all its agents, and removed all their groups, once its
// root was killed: a shutdown of 2,000 agents in 100 such subtrees did
// 2,000 records and 4,000 rmdirs after the grace (issue 22).
//
// Only an agent whose group, and every group nested in it, holds no
// process while its subtree's Stop covers it (supervisor.Gone: nothing
// starts there again) is recorded here: the supervisor reports its
// process's exit (exitOwned, on the reaping goroutine), and a batch, a
// moment later, checks its group and records every such agent of every
// subtree in one transaction, then removes their groups. An agent whose
// process exited but whose group still holds a process (something it
// forked that ignores SIGTERM) is looked at again at each batch; one never
// found gone is recorded by its subtree's stop, as before. Its subtree's
// root is always its stop's. A kill -9 of the daemon meanwhile leaves
// each agent either recorded (its processes gone; its empty groups, if
// left, are removed by the next start as any stopped agent's) or stopping,
// which the next start reconciles as before.
type goneEnds struct {
	run  *Runner
	kick chan struct{} // an exit came
	quit chan struct{} // closed by close
	over chan struct{} // closed once the loop returned

	mu       sync.Mutex
	of       map[kin.AgentID]stopEnd // the agents it may record: a subtree's own until its stop takes them (take)
	exits    []kin.AgentID           // exits reported since the last batch
	waiting  []kin.AgentID           // exited, their groups not empty at the last batch
	recorded map[*cancellation][]*kin.Agent

	batch sync.Mutex // held through a batch: take waits for the one in flight

	// unsignalled counts the subtrees whose SIGTERM has not gone out yet
	// (signalled); heard is closed when it reaches 0: no batch begins
	// before, so that none takes the CPU from the signals, on which each
	// subtree's grace, and the shutdown's end, wait.
	unsignalled sync.WaitGroup
	heard       chan struct{}
}

// goneGather is how long a batch waits after the first exit it records
// for more: a subtree's children die of its SIGTERM within a few
// milliseconds of each other, and a hundred subtrees are signalled within
// a few hundred; a grace is seconds.
const goneGather = 50 * time.Millisecond

// heldFor bounds how long the exits wait for the signals (newGoneEnds).
const heldFor = time.Second

// newGoneEnds starts recording the ends of cs's agents but their roots as
// their processes are found gone. close stops it.
func (run *Runner) newGoneEnds(cs []*cancellation) *goneEnds {
	g := &goneEnds{run: run, kick: make(chan struct{}, 1), quit: make(chan struct{}), over: make(chan struct{}),
		of: map[kin.AgentID]stopEnd{}, recorded: map[*cancellation][]*kin.Agent{}, heard: make(chan struct{})}
	g.unsignalled.Add(len(cs))
	// Until then the agents' exits wait too (reaped, their logs' ends
	// drained), at most heldFor: a stop waiting for a process to be reaped
	// may be one not signalled yet.
	resumeReaping, resumeDrains := func() {}, func() {}
	if run.sup.Containment() == supervisor.ContainmentCgroup2 { // (the fallback's stops wait for the reaping)
		resumeReaping, resumeDrains = run.sup.HoldReaping(), run.logs.Pause()
	}
	go func() {
		defer resumeDrains()
		defer resumeReaping()
		signalled := make(chan struct{})
		go func() {
			g.unsignalled.Wait()
			close(signalled)
		}()
		t := time.NewTimer(heldFor)
		defer t.Stop()
		select {
		case <-signalled:
		case <-t.C:
			run.log.Warn("shutdown: the agents' exits held for the signals no longer", "held", heldFor.String())
		}
		close(g.heard)
	}()
	for _, c := range cs {
		c.gone = g
		c.signalled = sync.OnceFunc(g.unsignalled.Done)
		for _, a := range c.mine {
			if a.ID != c.Root {
				g.of[a.ID] = stopEnd{c: c, a: a}
			}
		}
	}
	run.rtMu.Lock()
	run.gone = g // exitOwned tells it of every exit from now on
	for id := range g.of {
		if rt := run.runtimes[id]; rt != nil && rt.exited {
			g.exits = append(g.exits, id) // before: the first batch looks at them
		}
	}
	run.rtMu.Unlock()
	if len(g.exits) > 0 {
		g.kick <- struct{}{}
	}
	go g.loop()
	return g
}

// exited is told of an agent whose process the supervisor reaped, on the
// reaping goroutine (under rtMu): it must not block.
func (g *goneEnds) exited(id kin.AgentID) {
	g.mu.Lock()
	_, ok := g.of[id]
	if ok {
		g.exits = append(g.exits, id)
	}
	g.mu.Unlock()
	if ok {
		select {
		case g.kick <- struct{}{}:
		default:
		}
	}
}

func (g *goneEnds) loop() {
	defer close(g.over)
	select {
	case <-g.heard:
	case <-g.quit:
		return
	}
	gather := time.NewTimer(0)
	<-gather.C
	for {
		select {
		case <-g.kick:
		case <-g.quit:
			return
		}
		gather.Reset(goneGather)
		select {
		case <-gather.C:
		case <-g.quit:
			return
		}
		g.record()
	}
}

// record is one batch: the agents reported exited (and those still
// waiting) whose groups are empty, recorded in one transaction, then their
// groups removed.
func (g *goneEnds) record() {
	g.batch.Lock()
	defer g.batch.Unlock()
	run := g.run
	g.mu.Lock()
	look := append(g.waiting, g.exits...)
	g.waiting, g.exits = nil, nil
	g.mu.Unlock()
	// Read outside mu: exited waits for it on the reaping goroutine.
	gone := make([]bool, len(look))
	for i, id := range look {
		gone[i] = run.sup.Gone(id)
	}
	var ends []stopEnd
	g.mu.Lock()
	for i, id := range look {
		end, ok := g.of[id]
		switch {
		case !ok: // its stop took it, or recorded already
		case gone[i]:
			ends = append(ends, end)
			delete(g.of, id)
		default:
			g.waiting = append(g.waiting, id)
		}
	}
	g.mu.Unlock()
	if len(ends) == 0 {
		return
	}
	// Their output is in their logs before their ends are recorded.
	flushBy := time.Now().Add(logFlushWait)
	for _, e := range ends {
		run.awaitLog(e.a.ID, flushBy)
	}
	ctx := context.Background()
	now := run.now()
	var done []*kin.Agent
	err := run.update(ctx, func(tx store.Tx, _ *store.AfterCommit) error {
		var err error
		done, err = run.recordStoppedTx(ctx, tx, now, ends, false)
		return err
	})
	if err != nil {
		// Left to their stops, which record them as before.
		run.log.Warn("shutdown: record the agents already gone", "agents", len(ends), "err", err)
		return
	}
	ids := idsOf(done)
	if err := run.sup.RemoveGone(ids); err != nil {
		run.log.Warn("shutdown: remove the groups of agents already gone", "err", err)
	}
	of := make(map[kin.AgentID]*cancellation, len(ends))
	for _, e := range ends {
		of[e.a.ID] = e.c
	}
	known := make(map[kin.AgentID]*kin.Agent, len(done))
	g.mu.Lock()
	for _, a := range done {
		c := of[a.ID]
		g.recorded[c] = append(g.recorded[c], a)
		known[a.ID] = a
	}
	g.mu.Unlock()
	for _, a := range done {
		run.dropRuntime(a.ID, false) // the shutdown removes the files after every stop
	}
	run.trimEnded(ctx, known, ids)
}

// take ends the recording of c's agents and returns those it recorded,
// as written; c's stop records the rest. A nil g takes nothing.
func (g *goneEnds) take(c *cancellation) []*kin.Agent {
	if g == nil {
		return nil
	}
	g.mu.Lock()
	for _, a := range c.mine {
		if end, ok := g.of[a.ID]; ok && end.c == c {
			delete(g.of, a.ID)
		}
	}
	g.mu.Unlock()
	g.batch.Lock() // a batch in flight may hold some of them
	defer g.batch.Unlock()
	g.mu.Lock()
	defer g.mu.Unlock()
	done := g.recorded[c]
	delete(g.recorded, c)
	return done
}

// close stops the recording and waits for a batch in flight.
func (g *goneEnds) close() {
	g.run.rtMu.Lock()
	if g.run.gone == g {
		g.run.gone = nil
	}
	g.run.rtMu.Unlock()
	close(g.quit)
	<-g.over
}
