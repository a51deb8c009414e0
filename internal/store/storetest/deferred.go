package storetest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/kin"
)

// Deferrable Updates (store.Deferrer): a registration's insert may be sent
// with a later statement, and when it fails (the name was taken) its
// Update, and those after it, run again. The cases below build one batch of
// registrations, deferrable and not, in a known order (the writer held by a
// blocking Update while they queue), and check what each caller was told
// against what the store keeps: on a driver that defers nothing they pass
// as they are.

// errTaken is a registration's refusal of a taken name, as the registry's.
var errTaken = errors.New("name taken: refused")

// regStep is one registration of a batch.
type regStep struct {
	name     string
	deferred bool  // through store.UpdateDeferrable
	parent   bool  // reads the parent's chain first (else a root: the insert is its first statement)
	after    bool  // reads after its insert (a deferred insert rides with its own read)
	early    bool  // fails with ErrBoom before any statement
	boom     bool  // fails with ErrBoom after its insert and event
	want     error // nil, errTaken or ErrBoom
}

// regResult is what one registration's caller was told.
type regResult struct {
	err    error
	agent  *kin.Agent
	events []kin.Event
	runs   int // how often its function ran
}

// queuer is a store that says how many Updates wait for its writer.
type queuer interface{ Queued() int }

// runBatch registers steps in one batch, in order, under parent, and
// returns what each was told.
func runBatch(t *testing.T, s store.Store, parent *kin.Agent, steps []regStep) []regResult {
	t.Helper()
	q, ok := s.(queuer)
	if !ok {
		t.Skipf("%T does not say how many Updates are queued", s)
	}
	ctx := context.Background()
	res := make([]regResult, len(steps))
	release := make(chan struct{})
	running := make(chan struct{})
	holder := make(chan error, 1)
	go func() {
		holder <- s.Update(ctx, func(tx store.Tx) error {
			close(running)
			<-release
			return nil
		})
	}()
	<-running
	var wg sync.WaitGroup
	deadline := time.Now().Add(time.Minute)
	for i, st := range steps {
		r := &res[i]
		fn := func(tx store.Tx) error {
			r.runs++ // the writer's goroutine runs fn; read after the Update returns
			r.agent, r.events = nil, nil
			if st.early {
				return ErrBoom
			}
			a := NewAgent(st.name, 0, 0)
			if st.parent {
				chain, err := tx.PermChain(ctx, parent.ID)
				if err != nil {
					return err
				}
				if len(chain) == 0 {
					return fmt.Errorf("no chain for agent %d", parent.ID)
				}
				a.Parent, a.Generation = parent.ID, chain[0].Agent.Generation+1
			}
			got, err := tx.AgentInsert(ctx, store.AgentInsertParams{Agent: a})
			if errors.Is(err, store.ErrNameTaken) {
				return errTaken
			}
			if err != nil {
				return err
			}
			if st.after {
				if _, err := tx.AgentCountLive(ctx, store.AgentCountLiveParams{}); err != nil {
					return err
				}
			}
			e, err := kin.NewEvent(kin.EventAgentRegistered, got.ID, got.Parent, map[string]any{"agent": got.ID, "name": got.Name})
			if err != nil {
				return err
			}
			e.Time = t0
			if e, err = tx.EventAppend(ctx, e); err != nil {
				return err
			}
			if st.boom {
				return ErrBoom
			}
			r.agent, r.events = got, []kin.Event{e}
			return nil
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if st.deferred {
				r.err = store.UpdateDeferrable(ctx, s, fn)
			} else {
				r.err = s.Update(ctx, fn)
			}
		}()
		// The next is queued after this one: the batch's order is steps'.
		for q.Queued() < i+1 {
			if time.Now().After(deadline) {
				t.Fatalf("update %d not queued after a minute", i)
			}
			runtime.Gosched()
		}
	}
	close(release)
	wg.Wait()
	if err := <-holder; err != nil {
		t.Fatal(err)
	}
	return res
}

// checkBatch checks what runBatch's callers were told against the store:
// each refused or failed as wanted and the rest committed, once each, with
// the ids they were told, gapless; the events theirs, and the log whole.
func checkBatch(t *testing.T, s store.Store, steps []regStep, res []regResult, before int) {
	t.Helper()
	ctx := context.Background()
	var events []kin.Event
	won := 0
	for i, st := range steps {
		r := res[i]
		if !errors.Is(r.err, st.want) || (st.want == nil) != (r.err == nil) {
			t.Errorf("update %d (%s): %v, want %v", i, st.name, r.err, st.want)
			continue
		}
		if !st.deferred && r.runs != 1 {
			t.Errorf("update %d (%s) is not deferrable and ran %d times", i, st.name, r.runs)
		}
		if r.err != nil {
			continue
		}
		won++
		got, err := s.AgentGetByID(ctx, r.agent.ID)
		if err != nil || got.Name != st.name {
			t.Errorf("update %d (%s) was told id %d, which the store holds as %v, %v", i, st.name, r.agent.ID, got, err)
		}
		for _, e := range r.events {
			if e.Agent != r.agent.ID {
				t.Errorf("update %d (%s): its event names agent %d, it is %d", i, st.name, e.Agent, r.agent.ID)
			}
		}
		events = append(events, r.events...)
	}
	if t.Failed() {
		t.FailNow()
	}
	all, err := s.AgentList(ctx, kin.AgentFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != before+won {
		t.Fatalf("%d agents stored, want %d before and the %d committed", len(all), before, won)
	}
	for i, a := range all {
		if a.ID != kin.AgentID(i+1) {
			t.Fatalf("the agents' ids have a gap: the %d-th is %d", i+1, a.ID)
		}
	}
	SortBySeq(events)
	sameEvents(t, storedEvents(t, s), events)
	CheckHead(t, s, events)
	_, v := LogKey(t)
	WantOK(t, Verify(t, s, v, nil), int64(len(events)), 0)
}

// wantFor fills each step's want from the names taken before it: a
// registration of a live name is refused.
func wantFor(steps []regStep, taken ...string) []regStep {
	live := slices.Clone(taken)
	for i := range steps {
		st := &steps[i]
		switch {
		case st.early:
			st.want = ErrBoom
		case slices.Contains(live, st.name):
			st.want = errTaken
		case st.boom:
			st.want = ErrBoom
		default:
			st.want = nil
			live = append(live, st.name)
		}
	}
	return steps
}

// testDeferredNameClashes: one batch of deferrable registrations, a third
// of whose names are taken (before the batch or earlier in it), the last
// one's too: each loser is refused, each winner committed once with the
// id it was told, the ids gapless, the log whole.
func testDeferredNameClashes(t *testing.T, s store.Store) {
	parent := Insert(t, s, "parent", 0)
	Insert(t, s, "taken", 0)
	var steps []regStep
	for i := range 48 {
		st := regStep{name: fmt.Sprintf("r%d", i), deferred: true, parent: i%6 != 5}
		switch {
		case i%4 == 3:
			st.name = fmt.Sprintf("r%d", i-2)
		case i%5 == 4, i == 47:
			st.name = "taken"
		}
		steps = append(steps, st)
	}
	steps = wantFor(steps, "parent", "taken")
	checkBatch(t, s, steps, runBatch(t, s, parent, steps), 2)
}

// testDeferredMixed: deferrable and other Updates in one batch, where a
// held insert's failure shows in the next Update's first read, in its
// ROLLBACK TO (it failed before any statement), in its own Update's read
// after the insert, at the flush before an
// Update that is not deferrable, and at the batch's end. Updates that are
// not deferrable run once.
func testDeferredMixed(t *testing.T, s store.Store) {
	parent := Insert(t, s, "parent", 0)
	Insert(t, s, "taken", 0)
	steps := wantFor([]regStep{
		{name: "m0", deferred: true, parent: true},
		{name: "taken", deferred: true, parent: true},
		{name: "m2", parent: true},
		{name: "m3", deferred: true},
		{name: "m4", deferred: true},
		{name: "m0", deferred: true},
		{name: "early", deferred: true, early: true},
		{name: "m7", deferred: true, parent: true},
		{name: "m8", parent: true, boom: true},
		{name: "m9", deferred: true},
		{name: "m7", deferred: true, parent: true},
		{name: "m11"},
		{name: "m12", deferred: true, parent: true},
		{name: "m13", deferred: true, boom: true},
		{name: "m14", deferred: true},
		{name: "m3", deferred: true, parent: true, after: true},
		{name: "m16", deferred: true, parent: true, after: true},
		{name: "m14", deferred: true},
	}, "parent", "taken")
	checkBatch(t, s, steps, runBatch(t, s, parent, steps), 2)
	// The store goes on: a later batch, the last insert's name taken.
	more := wantFor([]regStep{
		{name: "n0", deferred: true, parent: true},
		{name: "n1", deferred: true},
		{name: "m2", deferred: true, parent: true},
	}, "parent", "taken", "m0", "m2", "m3", "m4", "m7", "m9", "m11", "m12", "m14", "m16")
	res := runBatch(t, s, parent, more)
	for i, st := range more {
		if !errors.Is(res[i].err, st.want) || (st.want == nil) != (res[i].err == nil) {
			t.Fatalf("second batch, update %d (%s): %v, want %v", i, st.name, res[i].err, st.want)
		}
	}
	if n, err := s.AgentCount(context.Background()); err != nil || n != 14 {
		t.Fatalf("%d agents, %v; want 14", n, err)
	}
}
