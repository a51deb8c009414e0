package runner

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/supervisor"
)

// within fails the test unless ch is closed (or sends) within 10 s.
func within(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal(what)
	}
}

// TestYieldGateRunsAfterTheLastHold: work queued while the gate is held
// runs once the last hold is released, in the order it was queued, on a
// goroutine of its own; with nothing holding it, at once on the caller's.
func TestYieldGateRunsAfterTheLastHold(t *testing.T) {
	var g yieldGate
	ran := false
	g.afterFree(func() { ran = true })
	if !ran {
		t.Fatal("work given to a free gate did not run at once")
	}
	if g.waitFree() != nil {
		t.Fatal("a free gate has a channel to wait on")
	}

	first, second := g.hold(), g.hold()
	free := g.waitFree()
	var mu sync.Mutex
	var order []int
	done := make(chan struct{})
	g.afterFree(func() { mu.Lock(); order = append(order, 1); mu.Unlock() })
	g.afterFree(func() { mu.Lock(); order = append(order, 2); mu.Unlock(); close(done) })
	first()
	first() // twice is once
	g.mu.Lock()
	queued, held := len(g.after), g.held
	g.mu.Unlock()
	if queued != 2 || held != 1 {
		t.Fatalf("after one of two holds was released: %d queued, %d held; want 2 and 1", queued, held)
	}
	select {
	case <-free:
		t.Fatal("the gate reads free while one hold is left")
	default:
	}
	second()
	within(t, free, "the gate did not read free after its last hold was released")
	within(t, done, "the queued work did not run after the last hold was released")
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(order, []int{1, 2}) {
		t.Fatalf("queued work ran in the order %v, want [1 2]", order)
	}
}

// TestYieldGateRunsQueuedWorkAfterYieldMax: a gate held for good (a stream
// of large stops) does not hold the queued work back past yieldMax, and
// that work does not run a second time at the release.
func TestYieldGateRunsQueuedWorkAfterYieldMax(t *testing.T) {
	was := yieldMax
	yieldMax = 20 * time.Millisecond
	t.Cleanup(func() { yieldMax = was })
	var g yieldGate
	release := g.hold()
	runs := make(chan struct{}, 2)
	g.afterFree(func() { runs <- struct{}{} })
	within(t, runs, "queued work waited past yieldMax")
	release()
	// A second run would come from the release, on a goroutine of its
	// own: watched for 50 ms.
	select {
	case <-runs:
		t.Fatal("queued work ran again at the release, after yieldMax had run it")
	case <-time.After(50 * time.Millisecond):
	}
	g.afterFree(func() { runs <- struct{}{} }) // free: at once
	if n := len(runs); n != 1 {
		t.Fatalf("%d runs of work given to the free gate, want 1", n)
	}
}

// TestWriterYieldsToLargeStops: while a large cancellation holds the gate
// (Runner.yield), the tree's writer applies no commit; a caller waiting
// for the tree (waitApplied: kin wait) is not held back by it; and the
// writer applies what is left once the gate is free. yieldMax is an hour
// here: without the waiter's case the wait runs into its deadline, and
// without the yield the writer applies the commit within the 50 ms watched
// for it.
func TestWriterYieldsToLargeStops(t *testing.T) {
	ctx := context.Background()
	w, st, waiting := newTestWriter(t, 0, time.Hour)
	go w.run()
	t.Cleanup(w.stop)
	commit := func() int64 {
		t.Helper()
		within(t, waiting, "the writer did not come to wait for a commit")
		var seq int64
		commitNoAgentEvent(t, st, &seq)
		return seq
	}

	release := w.d.yield.hold()
	seq := commit()
	notApplied(t, w, seq, "while a large stop held the gate")
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := w.waitApplied(wctx, seq); err != nil {
		t.Fatalf("waiting for the tree while a stop held the gate: %v (the writer yielded to the stop, not to the waiter)", err)
	}

	seq = commit()
	notApplied(t, w, seq, "while a large stop held the gate")
	_, advance := writerAt(w)
	release()
	within(t, advance, "the writer did not apply the commit once the gate was free")
	if got, _ := writerAt(w); got < seq {
		t.Fatalf("the writer applied up to event %d, want %d", got, seq)
	}
}

// TestStopLeavesGroupRemovalsToTheGate: a stop's emptied groups are let go
// of (supervisor.HoldRemovals) through the gate: while a large cancellation
// holds it, not when the stop returns, and once it is free, once. (The
// first version released them at the stop's return all the same: the
// function its deferred call read was still the real one; a review found
// it.)
func TestStopLeavesGroupRemovalsToTheGate(t *testing.T) {
	sup, err := supervisor.New(supervisor.Config{DeferRemove: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sup.Close() })
	released := make(chan struct{}, 4)
	was := releasingGroups
	releasingGroups = func() { released <- struct{}{} }
	t.Cleanup(func() { releasingGroups = was })
	run := &Runner{sup: sup, log: slog.New(slog.DiscardHandler)}

	free := run.yield.hold() // another large stop runs
	if _, err := run.stopAndRecord(context.Background(), &cancellation{cancelParams: cancelParams{Root: 1}}); err != nil {
		t.Fatal(err)
	}
	if n := len(released); n != 0 {
		t.Fatalf("the stop let its groups go %d time(s) while the gate was held", n)
	}
	free()
	within(t, released, "the stop's groups were not let go once the gate was free")
	if _, err := run.stopAndRecord(context.Background(), &cancellation{cancelParams: cancelParams{Root: 2}}); err != nil {
		t.Fatal(err)
	}
	if n := len(released); n != 1 {
		t.Fatalf("a stop with the gate free let its groups go %d time(s) by its return, want once (the first stop's twice?)", n)
	}
}

// TestWriterDoesNotYieldWhileWaitedFor: a caller that starts waiting for
// the tree (kin wait) while the woken writer settles, so that the settling
// takes its hurry, is not held back by a large stop either: the writer
// counts it (ctxWriter.waiting) and does not yield while it waits. yieldMax
// is an hour and settleFor a second here: without the count the wait runs
// into its deadline.
func TestWriterDoesNotYieldWhileWaitedFor(t *testing.T) {
	ctx := context.Background()
	w, st, waiting := newTestWriter(t, time.Second, time.Hour)
	var seq int64
	waited := make(chan error, 1)
	settling = func() {
		go func() {
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			waited <- w.waitApplied(wctx, seq)
		}()
	}
	go w.run()
	t.Cleanup(w.stop)

	free := w.d.yield.hold()
	defer free()
	within(t, waiting, "the writer did not come to wait for a commit")
	commitNoAgentEvent(t, st, &seq) // seq is set before the commit wakes the writer
	select {
	case err := <-waited:
		if err != nil {
			t.Fatalf("waiting for the tree while a stop held the gate: %v (the writer yielded to the stop, not to the waiter)", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the wait for the tree did not return")
	}
}
