package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/kin"
)

// Notifications and several handles on one store: what lets more than one
// daemon (or a daemon and a tool) share a store. Each handle stands for a
// process: its own connections, writer and caches.

// wakeWithin bounds how long a waiter may take to wake after a commit:
// generous, for loaded machines; drivers document their own latency.
const wakeWithin = 10 * time.Second

// woken reports whether ch closes within wakeWithin.
func woken(ch <-chan struct{}) bool {
	t := time.NewTimer(wakeWithin)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
		return false
	}
}

// testNotifyOwnCommits: a commit that appends events wakes a waiter that
// took its channel before the commit, and the events are readable then. (A
// commit without events need not wake anyone; it may.)
func testNotifyOwnCommits(t *testing.T, s store.Store) {
	ctx := context.Background()
	for round := range 3 {
		ch := s.Wait()
		got, err := AppendEvents(t, s, round, round+1, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !woken(ch) {
			t.Fatalf("round %d: a waiter taken before a commit with events was not woken within %s", round, wakeWithin)
		}
		evs, err := s.EventList(ctx, kin.EventFilter{Since: got[0].Seq - 1})
		if err != nil || len(evs) != 1 || evs[0].Seq != got[0].Seq {
			t.Fatalf("round %d: after the wake EventList = %v, %v; want seq %d", round, evs, err, got[0].Seq)
		}
	}
	// Without events, then with: the second commit wakes whatever the
	// first left waiting.
	ch := s.Wait()
	Insert(t, s, "no-events", 0)
	if _, err := AppendEvents(t, s, 3, 4, nil); err != nil {
		t.Fatal(err)
	}
	if !woken(ch) {
		t.Fatal("a waiter taken before a commit without events and one with was not woken")
	}
}

// testSubscribeSleepsThroughOtherTypes: where a store can subscribe
// (store.Subscriber), a waiter for some event types sleeps through this
// handle's commits of other types alone and wakes at one of its types,
// and a waiter for every type but some wakes at the rest.
func testSubscribeSleepsThroughOtherTypes(t *testing.T, s store.Store) {
	if _, ok := s.(store.Subscriber); !ok {
		t.Skip("the store does not subscribe by type")
	}
	ctx := context.Background()
	appendType := func(typ string) {
		t.Helper()
		if err := s.Update(ctx, func(tx store.Tx) error {
			_, err := tx.EventAppend(ctx, kin.Event{Time: time.Now(), Type: typ, Agent: 1, Data: []byte(`{}`)})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	only := store.WaitFor(s, []string{kin.EventAgentRegistered}, false)
	but := store.WaitFor(s, []string{kin.EventModelCall}, true)
	o, b, all := only(), but(), s.Wait()
	appendType(kin.EventModelCall)
	if !woken(all) {
		t.Fatal("a model.call's commit did not wake Wait's waiter")
	}
	// Both subscriptions sleep: the next commit of a type each cares for
	// wakes it, and a wake-up the model.call had caused would be seen here.
	appendType(kin.EventAgentExited)
	if !woken(b) {
		t.Fatal("agent.exited did not wake the waiter for every type but model.call")
	}
	select {
	case <-o:
		t.Fatal("model.call and agent.exited woke the waiter for agent.registered")
	default:
	}
	appendType(kin.EventAgentRegistered)
	if !woken(o) {
		t.Fatal("agent.registered did not wake its waiter")
	}
	b = but()
	appendType(kin.EventModelCall)
	appendType(kin.EventAgentRegistered)
	if !woken(b) {
		t.Fatal("agent.registered did not wake the waiter for every type but model.call")
	}
}

// testNotifyOtherHandle: a waiter of one handle wakes when another handle
// on the same store commits events, and reads them.
func testNotifyOtherHandle(t *testing.T, a store.Store, second func() store.Store) {
	ctx := context.Background()
	b := second()
	for round := range 3 {
		w, c := b, a // b waits, a commits; then the other way round
		if round%2 == 1 {
			w, c = a, b
		}
		ch := w.Wait()
		got, err := AppendEvents(t, c, round, round+1, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !woken(ch) {
			t.Fatalf("round %d: a waiter was not woken within %s of another handle's commit with events", round, wakeWithin)
		}
		evs, err := w.EventList(ctx, kin.EventFilter{Since: got[0].Seq - 1})
		if err != nil || len(evs) != 1 || evs[0].Seq != got[0].Seq {
			t.Fatalf("round %d: after the wake EventList = %v, %v; want seq %d", round, evs, err, got[0].Seq)
		}
	}
}

// testFollowAcrossHandles follows the log from one handle, as
// `/v1/events?follow=true` does (take the channel, read, wait), while both
// handles append: the follower sees every event, in order, once.
func testFollowAcrossHandles(t *testing.T, a store.Store, second func() store.Store) {
	ctx := context.Background()
	b := second()
	const writers, updates, perUpdate = 4, 10, 3
	const total = writers * updates * perUpdate
	var next atomic.Int64
	followed := make(chan error, 1)
	go func() {
		var since int64
		deadline := time.NewTimer(time.Minute)
		defer deadline.Stop()
		for since < total {
			wake := b.Wait()
			evs, err := b.EventList(ctx, kin.EventFilter{Since: since})
			if err != nil {
				followed <- err
				return
			}
			for _, e := range evs {
				if e.Seq != since+1 {
					followed <- fmt.Errorf("the follower read seq %d after %d", e.Seq, since)
					return
				}
				since = e.Seq
			}
			if len(evs) > 0 {
				continue
			}
			select {
			case <-wake:
			case <-deadline.C:
				followed <- fmt.Errorf("the follower saw %d of %d events and was not woken for the rest", since, total)
				return
			}
		}
		followed <- nil
	}()
	var wg sync.WaitGroup
	for w := range writers {
		s := a
		if w%2 == 1 {
			s = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range updates {
				from := int(next.Add(perUpdate)) - perUpdate
				if _, err := AppendEvents(t, s, from, from+perUpdate, nil); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := <-followed; err != nil {
		t.Fatal(err)
	}
}

// errFull is what testTwoHandlesHoldALimit's Updates return when the
// parent has its children.
var errFull = errors.New("the parent has its children")

// testTwoHandlesHoldALimit races count-then-insert Updates from two
// handles, as two daemons registering children of one parent would: the
// count read in the transaction must hold for its insert, so the parent
// never gets more children than the limit.
func testTwoHandlesHoldALimit(t *testing.T, a store.Store, second func() store.Store) {
	ctx := context.Background()
	b := second()
	const perHandle, limit, rounds = 32, 10, raceRounds
	for r := range rounds {
		parent := Insert(t, a, fmt.Sprintf("parent-%d", r), 0)
		admitted, refused := raceHandles(t, a, b, perHandle, func(s store.Store, h, g int) error {
			return updateFor(s, g)(ctx, func(tx store.Tx) error {
				n, err := tx.AgentCountLive(ctx, store.AgentCountLiveParams{Parent: parent.ID, HasParent: true})
				if err != nil {
					return err
				}
				if n >= limit {
					return errFull
				}
				child, err := tx.AgentInsert(ctx, store.AgentInsertParams{Agent: NewAgent(fmt.Sprintf("c%d-%d-%d", r, h, g), parent.ID, 1)})
				if err != nil {
					return err
				}
				e, err := kin.NewEvent(kin.EventChildSpawned, child.ID, parent.ID, map[string]any{"child": child.ID, "n": n})
				if err != nil {
					return err
				}
				e.Time = t0
				_, err = tx.EventAppend(ctx, e)
				return err
			})
		})
		if admitted != limit || refused != 2*perHandle-limit {
			t.Fatalf("round %d: %d admitted and %d refused; want %d and %d", r, admitted, refused, limit, 2*perHandle-limit)
		}
		for i, s := range []store.Store{a, b} {
			kids, err := s.AgentList(ctx, kin.AgentFilter{Parent: parent.ID, HasParent: true})
			if err != nil || len(kids) != limit {
				t.Fatalf("round %d: handle %d lists %d children, %v; want %d", r, i, len(kids), err, limit)
			}
		}
	}
	// The children's events, from both handles, make one gapless log.
	stored := storedEvents(t, a)
	if len(stored) != rounds*limit {
		t.Fatalf("%d events stored, want %d", len(stored), rounds*limit)
	}
	_, v := LogKey(t)
	CheckHead(t, a, stored)
	CheckHead(t, b, stored)
	WantOK(t, Verify(t, b, v, nil), rounds*limit, 0)
}

// testTwoHandlesAppendOneLog appends from two handles at once: each
// handle's batches continue the log the other extended, so the seqs stay
// gapless and the tree verifies; and each handle's LogHead reports the
// other's appends.
func testTwoHandlesAppendOneLog(t *testing.T, a store.Store, second func() store.Store) {
	b := second()
	key, v := LogKey(t)
	var next atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var all []kin.Event
	for w := range 8 {
		s := a
		if w%2 == 1 {
			s = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for u := range 12 {
				n := 1 + (w+u)%4
				from := int(next.Add(int64(n))) - n
				fail := error(nil)
				if u%5 == 4 {
					fail = ErrBoom // takes no seq, on either handle
				}
				got, err := AppendEvents(t, s, from, from+n, fail)
				if !errors.Is(err, fail) {
					t.Errorf("writer %d: %v, want %v", w, err, fail)
					return
				}
				if err == nil {
					mu.Lock()
					all = append(all, got...)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	SortBySeq(all)
	CheckHead(t, a, all)
	CheckHead(t, b, all)
	sameEvents(t, storedEvents(t, b), all)
	WantOK(t, Verify(t, a, v, nil), int64(len(all)), 0)
	// A checkpoint signed from one handle's head verifies through the
	// other; one more append from a is seen by b's LogHead.
	Checkpoint(t, a, key)
	more, err := AppendEvents(t, a, int(next.Load()), int(next.Load())+3, nil)
	if err != nil {
		t.Fatal(err)
	}
	all = append(all, more...)
	CheckHead(t, b, all)
	Checkpoint(t, b, key)
	WantOK(t, Verify(t, b, v, nil), int64(len(all)), 2)
}

// raceRounds is how many times each race between two handles is run:
// a race lost once in a few rounds shows in twenty.
const raceRounds = 20

// testTwoHandlesHoldACardinality races what a registration under a
// cardinality rule does (seed 002: at most N live agents of a role in one
// name context), from two handles: count the live agents of the role and
// context in the transaction, refuse at the limit, else insert one. Each
// round's role and context are its own; agents of the same role in
// another context, and of another role in the same context, must not
// count.
func testTwoHandlesHoldACardinality(t *testing.T, a store.Store, second func() store.Store) {
	ctx := context.Background()
	b := second()
	const perHandle, limit = 32, 3
	for r := range raceRounds {
		role, nameCtx := fmt.Sprintf("role%d", r), fmt.Sprintf("ctx%d", r)
		other := fmt.Sprintf("other%d", r)
		// Decoys: the role elsewhere, another role here.
		for i, p := range [][2]string{{role, other}, {other, nameCtx}} {
			ag := NewAgent(fmt.Sprintf("decoy%d-%d", r, i), 0, 0)
			ag.Role = p[0]
			update(t, a, func(tx store.Tx) error {
				_, err := tx.AgentInsert(ctx, store.AgentInsertParams{Agent: ag, NameContext: p[1]})
				return err
			})
		}
		admitted, refused := raceHandles(t, a, b, perHandle, func(s store.Store, h, g int) error {
			return updateFor(s, g)(ctx, func(tx store.Tx) error {
				n, err := tx.AgentCountLive(ctx, store.AgentCountLiveParams{Role: role, NameContext: &nameCtx})
				if err != nil {
					return err
				}
				if n >= limit {
					return errFull
				}
				ag := NewAgent(fmt.Sprintf("%s-%s-%d-%d", role, nameCtx, h, g), 0, 0)
				ag.Role = role
				_, err = tx.AgentInsert(ctx, store.AgentInsertParams{Agent: ag, NameContext: nameCtx})
				return err
			})
		})
		if admitted != limit || refused != 2*perHandle-limit {
			t.Fatalf("round %d: %d admitted and %d refused under a cardinality of %d; want %d and %d",
				r, admitted, refused, limit, limit, 2*perHandle-limit)
		}
		for i, s := range []store.Store{a, b} {
			got, err := s.AgentList(ctx, kin.AgentFilter{Role: role})
			if err != nil || len(got) != limit+1 { // the decoy in the other context too
				t.Fatalf("round %d: handle %d lists %d agents of %s, %v; want %d", r, i, len(got), role, err, limit+1)
			}
		}
	}
}

// testTwoHandlesHoldASpawnBudget races what a registration under a
// max_descendants budget does, from two handles: read the grandparent's
// spawn count in the transaction (PermChain), refuse at the budget, else
// insert a grandchild and count it (SpendSpawnAdd). The counter the check
// reads is the one the transaction writes, so the budget holds across
// handles and within one handle's group commits, whether the count is
// written at once or held for the next statement (updateFor).
func testTwoHandlesHoldASpawnBudget(t *testing.T, a store.Store, second func() store.Store) {
	b := second()
	const perHandle, budget = 32, 5
	for r := range raceRounds {
		testSpawnBudgetRound(t, a, b, r, perHandle, budget)
	}
}

func testSpawnBudgetRound(t *testing.T, a, b store.Store, r, perHandle int, budget int64) {
	ctx := context.Background()
	top := Insert(t, a, fmt.Sprintf("budgeted-%d", r), 0)
	mid := Insert(t, a, fmt.Sprintf("mid-%d", r), top.ID)
	update(t, a, func(tx store.Tx) error { return tx.SpendSpawnAdd(ctx, []kin.AgentID{top.ID}) }) // mid counts
	admitted, refused := raceHandles(t, a, b, perHandle, func(s store.Store, h, g int) error {
		// Half deferrable, as the registry registers (re-runnable: its
		// only effects are tx's).
		return updateFor(s, g)(ctx, func(tx store.Tx) error {
			chain, err := tx.PermChain(ctx, mid.ID)
			if err != nil {
				return err
			}
			if len(chain) != 2 || chain[1].ID != top.ID {
				return fmt.Errorf("chain of mid: %+v", chain)
			}
			if chain[1].Spend.Spawns >= budget {
				return errFull
			}
			if _, err := tx.AgentInsert(ctx, store.AgentInsertParams{Agent: NewAgent(fmt.Sprintf("g%d-%d-%d", r, h, g), mid.ID, 2)}); err != nil {
				return err
			}
			return tx.SpendSpawnAdd(ctx, []kin.AgentID{top.ID})
		})
	})
	if admitted != budget-1 || refused != int64(2*perHandle)-(budget-1) {
		t.Fatalf("round %d: %d admitted and %d refused under a budget of %d descendants (one spent); want %d and %d",
			r, admitted, refused, budget, budget-1, int64(2*perHandle)-(budget-1))
	}
	for i, s := range []store.Store{a, b} {
		chain, err := s.PermChain(ctx, top.ID)
		if err != nil || len(chain) != 1 || chain[0].Spend.Spawns != budget {
			t.Fatalf("round %d: handle %d reads the budget's counter as %+v, %v; want %d spawns", r, i, chain, err, budget)
		}
	}
}

// testTwoHandlesHoldASpendCap races what usage under a max_tokens budget
// does, from two handles: add the spend (to the agent and every subtree it
// lies in), read the budgeted ancestor's subtree sum back in the same
// transaction, and refuse (undoing the add) past the cap. The sum read is
// the one the transaction wrote, so the cap holds across handles, whether
// the add is written at once or held for the read (updateFor).
func testTwoHandlesHoldASpendCap(t *testing.T, a store.Store, second func() store.Store) {
	ctx := context.Background()
	b := second()
	const perHandle, each, limit = 32, 10, 95
	top := Insert(t, a, "capped", 0)
	leaf := Insert(t, a, "spender", top.ID)
	admitted, refused := raceHandles(t, a, b, perHandle, func(s store.Store, h, g int) error {
		return updateFor(s, g)(ctx, func(tx store.Tx) error {
			if err := tx.SpendAdd(ctx, leaf.ID, each, 0); err != nil {
				return err
			}
			chain, err := tx.PermChain(ctx, leaf.ID)
			if err != nil {
				return err
			}
			if len(chain) != 2 {
				return fmt.Errorf("chain of the spender: %+v", chain)
			}
			if chain[1].Spend.SubTokens > limit {
				return errFull
			}
			return nil
		})
	})
	if admitted != limit/each || refused != 2*perHandle-limit/each {
		t.Fatalf("%d admitted and %d refused under a cap of %d tokens, %d each; want %d and %d",
			admitted, refused, limit, each, limit/each, 2*perHandle-limit/each)
	}
	for i, s := range []store.Store{a, b} {
		chain, err := s.PermChain(ctx, leaf.ID)
		if err != nil || len(chain) != 2 || chain[1].Spend.SubTokens != limit/each*each || chain[0].Spend.Tokens != limit/each*each {
			t.Fatalf("handle %d reads the sums as %+v, %v; want %d tokens in both", i, chain, err, limit/each*each)
		}
	}
}

// updateFor is the g-th racer's way to update s: every other one through
// store.UpdateDeferrable (its function is re-runnable), every fourth of
// those lazy too (store.LazyDeferrer, as the model gateway's metering),
// so that a batch mixes them.
func updateFor(s store.Store, g int) func(context.Context, func(store.Tx) error) error {
	if l, ok := s.(store.LazyDeferrer); ok && g%4 == 3 {
		return l.UpdateLazyDeferrable
	}
	if g%2 == 1 {
		return func(ctx context.Context, fn func(store.Tx) error) error { return store.UpdateDeferrable(ctx, s, fn) }
	}
	return s.Update
}

// testTwoHandlesDeferredNames races deferrable registrations of the same
// names from two handles (store.Deferrer: an insert may be sent with a
// later statement, and run again when the name was taken meanwhile, by
// this handle's batch or the other's): each name is registered once, every
// other registration of it refused with ErrNameTaken; the ids are gapless
// and both handles verify one log.
func testTwoHandlesDeferredNames(t *testing.T, a store.Store, second func() store.Store) {
	ctx := context.Background()
	b := second()
	const perHandle, names = 32, 8
	for r := range raceRounds / 4 {
		admitted, refused := raceHandles(t, a, b, perHandle, func(s store.Store, h, g int) error {
			err := store.UpdateDeferrable(ctx, s, func(tx store.Tx) error {
				child, err := tx.AgentInsert(ctx, store.AgentInsertParams{Agent: NewAgent(fmt.Sprintf("n%d-%d", r, g%names), 0, 0)})
				if err != nil {
					return err
				}
				e, err := kin.NewEvent(kin.EventAgentRegistered, child.ID, 0, map[string]any{"agent": child.ID, "h": h, "g": g})
				if err != nil {
					return err
				}
				e.Time = t0
				_, err = tx.EventAppend(ctx, e)
				return err
			})
			if errors.Is(err, store.ErrNameTaken) {
				return errFull
			}
			return err
		})
		if admitted != names || refused != 2*perHandle-names {
			t.Fatalf("round %d: %d admitted and %d refused; want %d and %d", r, admitted, refused, names, 2*perHandle-names)
		}
	}
	all, err := b.AgentList(ctx, kin.AgentFilter{})
	if err != nil {
		t.Fatal(err)
	}
	for i, ag := range all {
		if ag.ID != kin.AgentID(i+1) {
			t.Fatalf("the agents' ids have a gap: the %d-th is %d", i+1, ag.ID)
		}
	}
	stored := storedEvents(t, a)
	if len(stored) != len(all) {
		t.Fatalf("%d events for %d agents", len(stored), len(all))
	}
	for _, e := range stored {
		if _, err := b.AgentGetByID(ctx, e.Agent); err != nil {
			t.Fatalf("event %d names agent %d: %v", e.Seq, e.Agent, err)
		}
	}
	_, v := LogKey(t)
	CheckHead(t, a, stored)
	CheckHead(t, b, stored)
	WantOK(t, Verify(t, b, v, nil), int64(len(stored)), 0)
}

// raceHandles runs fn perHandle times on each of two handles, all at once,
// and counts the Updates it let through and those it refused with errFull;
// any other error fails t.
func raceHandles(t *testing.T, a, b store.Store, perHandle int, fn func(s store.Store, h, g int) error) (admitted, refused int64) {
	t.Helper()
	start := make(chan struct{})
	var ok, full atomic.Int64
	var wg sync.WaitGroup
	for h, s := range []store.Store{a, b} {
		for g := range perHandle {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				switch err := fn(s, h, g); {
				case err == nil:
					ok.Add(1)
				case errors.Is(err, errFull):
					full.Add(1)
				default:
					t.Errorf("handle %d, update %d: %v", h, g, err)
				}
			}()
		}
	}
	close(start)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return ok.Load(), full.Load()
}

// testAppendedHere: a handle that says which events it appended
// (store.AppendedHere) claims its own commits' events, rolled-back appends
// excluded, and never another handle's, however the two interleave.
func testAppendedHere(t *testing.T, a store.Store, second func() store.Store) {
	ha, ok := a.(store.AppendedHere)
	if !ok {
		t.Skipf("%T does not say which events it appended (store.AppendedHere)", a)
	}
	b := second()
	hb := b.(store.AppendedHere)
	mine := map[int64]store.AppendedHere{}
	for round := range 6 {
		by, h := a, ha
		if round%3 == 2 { // a, a, b, a, a, b: runs of one handle, and turns
			by, h = b, hb
		}
		got, err := AppendEvents(t, by, 2*round, 2*round+2, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range got {
			mine[e.Seq] = h
		}
		// An Update that fails appends nothing, and claims nothing.
		if _, err := AppendEvents(t, by, 100, 101, errors.New("undone")); err == nil {
			t.Fatal("a failing Update committed")
		}
	}
	for seq, h := range mine {
		for _, c := range []store.AppendedHere{ha, hb} {
			if got, want := c.AppendedHere(seq), c == h; got != want {
				t.Errorf("AppendedHere(%d) = %v on the handle that %s it", seq, got, map[bool]string{true: "appended", false: "did not append"}[want])
			}
		}
	}
	for _, seq := range []int64{0, int64(len(mine) + 1), -1} {
		if ha.AppendedHere(seq) || hb.AppendedHere(seq) {
			t.Errorf("AppendedHere(%d), an event nobody appended, is true", seq)
		}
	}
}

// testTwoHandlesDeferredChains: a deferrable Update reads a permission
// chain as the store holds it at that point, however the handle came by
// it (PostgreSQL's writer remembers the chains it read and checks them
// with the next statement: sqlstore's speculate.go): after the other
// handle counted a spawn and suspended the agent, after this handle's own
// write that is not a count, and in each of many rounds of both.
func testTwoHandlesDeferredChains(t *testing.T, a store.Store, second func() store.Store) {
	ctx := context.Background()
	b := second()
	top := Insert(t, a, "chain-top", 0)
	mid := Insert(t, a, "chain-mid", top.ID)
	// read is what a deferrable Update of a reads as mid's chain: mid's
	// status and the top's spawn count.
	read := func() (kin.Status, int64) {
		t.Helper()
		var status kin.Status
		var spawns int64
		err := store.UpdateDeferrable(ctx, a, func(tx store.Tx) error {
			chain, err := tx.PermChain(ctx, mid.ID)
			if err != nil {
				return err
			}
			if len(chain) != 2 || chain[0].Agent == nil || chain[1].ID != top.ID {
				return fmt.Errorf("chain of mid: %+v", chain)
			}
			status, spawns = chain[0].Agent.Status, chain[1].Spend.Spawns
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return status, spawns
	}
	setStatus := func(s store.Store, st kin.Status) {
		t.Helper()
		update(t, s, func(tx store.Tx) error {
			return tx.AgentUpdateStatus(ctx, store.AgentUpdateStatusParams{ID: mid.ID, Status: st, At: t0})
		})
	}
	for r := range 5 {
		read()
		read() // remembered, where a driver remembers
		update(t, b, func(tx store.Tx) error { return tx.SpendSpawnAdd(ctx, []kin.AgentID{top.ID}) })
		setStatus(b, kin.StatusSuspended)
		if status, spawns := read(); status != kin.StatusSuspended || spawns != int64(r+1) {
			t.Fatalf("round %d: after the other handle's writes, a deferrable Update reads mid %s with %d spawns above it; want %s and %d",
				r, status, spawns, kin.StatusSuspended, r+1)
		}
		setStatus(a, kin.StatusActive)
		if status, _ := read(); status != kin.StatusActive {
			t.Fatalf("round %d: after this handle's write, a deferrable Update reads mid %s; want %s", r, status, kin.StatusActive)
		}
	}
}
