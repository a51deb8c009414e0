package kin

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeStopper is a RunnerService whose Stop is stop: a fake, for what a
// real daemon cannot be made to show on demand (how many stops are in
// flight, an interruption while they are). internal/cli's TestStopSeveral
// runs StopAll against a real daemon.
type fakeStopper struct {
	RunnerService
	stop func(ctx context.Context, req StopRequest) ([]*Agent, error)
}

func (f fakeStopper) Stop(ctx context.Context, req StopRequest) ([]*Agent, error) {
	return f.stop(ctx, req)
}

func idsUpTo(n int) []AgentID {
	ids := make([]AgentID, n)
	for i := range ids {
		ids[i] = AgentID(i + 1)
	}
	return ids
}

// blockedStops is a fake whose stops wait for gate, counting those in
// flight; full is closed once StopAtOnce are.
type blockedStops struct {
	inflight, most, calls atomic.Int32
	gate, full            chan struct{}
	fullOnce              sync.Once
}

func newBlockedStops() *blockedStops {
	return &blockedStops{gate: make(chan struct{}), full: make(chan struct{})}
}

func (b *blockedStops) service() fakeStopper {
	return fakeStopper{stop: func(ctx context.Context, req StopRequest) ([]*Agent, error) {
		b.calls.Add(1)
		n := b.inflight.Add(1)
		defer b.inflight.Add(-1)
		for m := b.most.Load(); n > m && !b.most.CompareAndSwap(m, n); m = b.most.Load() {
		}
		if n == StopAtOnce {
			b.fullOnce.Do(func() { close(b.full) })
		}
		select {
		case <-b.gate:
			return []*Agent{{ID: req.ID}}, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}}
}

func (b *blockedStops) awaitFull(t *testing.T) {
	t.Helper()
	select {
	case <-b.full:
	case <-time.After(10 * time.Second):
		t.Fatalf("%d stops in flight after 10 s, want %d", b.inflight.Load(), StopAtOnce)
	}
}

func TestStopAllFakeServiceKeepsAtMostSixteenInFlight(t *testing.T) {
	b := newBlockedStops()
	type result struct {
		stopped []*Agent
		err     error
	}
	done := make(chan result, 1)
	go func() {
		stopped, err := StopAll(context.Background(), b.service(), idsUpTo(100), StopRequest{})
		done <- result{stopped, err}
	}()
	b.awaitFull(t)
	close(b.gate)
	r := <-done
	if r.err != nil || len(r.stopped) != 100 {
		t.Fatalf("%d stopped, %v; want 100", len(r.stopped), r.err)
	}
	for i, a := range r.stopped {
		if a.ID != AgentID(i+1) {
			t.Fatalf("stopped[%d] is agent %d: not by id", i, a.ID)
		}
	}
	if m := b.most.Load(); m != StopAtOnce {
		t.Errorf("%d stops were in flight at once, want at most %d (and that many)", m, StopAtOnce)
	}
}

func TestStopAllFakeServiceInterruptedSendsNoMore(t *testing.T) {
	b := newBlockedStops()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := StopAll(ctx, b.service(), idsUpTo(100), StopRequest{})
		done <- err
	}()
	b.awaitFull(t)
	cancel()
	err := <-done
	if ErrorCodeOf(err) != ECodeUnavailable || !strings.Contains(err.Error(), "interrupted: the stops of 16 of 100 agents were sent") {
		t.Errorf("error %v, want unavailable, 16 of 100 sent", err)
	}
	if n := b.calls.Load(); n != StopAtOnce {
		t.Errorf("%d stops sent, want %d: none after the interruption", n, StopAtOnce)
	}
}

func TestStopAllFakeServiceMergesAndNamesFailures(t *testing.T) {
	// Agent 1's stop ends 2 too (its owned child), whose own stop then
	// finds it ended: not a failure. 3, 4 and 5 cannot be reached.
	svc := fakeStopper{stop: func(_ context.Context, req StopRequest) ([]*Agent, error) {
		switch req.ID {
		case 1:
			return []*Agent{{ID: 1}, {ID: 2}}, nil
		case 2:
			return nil, Errorf(ECodeInvalidTransition, "agent 2 has already ended (cancelled)")
		case 6:
			return nil, Errorf(ECodeNotFound, "agent 6 not found")
		}
		return nil, Errorf(ECodeUnavailable, "cannot reach kin")
	}}
	stopped, err := StopAll(context.Background(), svc, []AgentID{2, 1}, StopRequest{})
	if err != nil || len(stopped) != 2 || stopped[0].ID != 1 || stopped[1].ID != 2 {
		t.Errorf("an agent inside another's subtree: stopped %v, %v", stopped, err)
	}
	_, err = StopAll(context.Background(), svc, []AgentID{3, 1, 4, 6, 5}, StopRequest{})
	want := "4 agents not stopped: agents 3, 4, 5: cannot reach kin [unavailable]; agent 6 not found [not_found]"
	if ErrorCodeOf(err) != ECodeUnavailable || ErrorMessageOf(err) != want {
		t.Errorf("error %v (%s), want %q with the first's code", err, ErrorCodeOf(err), want)
	}
	_, err = StopAll(context.Background(), svc, []AgentID{6, 1, 6}, StopRequest{})
	if ErrorMessageOf(err) != "agent 6 not found" {
		t.Errorf("an agent named twice: %v, want it stopped (and failed) once", err)
	}
	_, err = StopAll(context.Background(), svc, []AgentID{1, 4}, StopRequest{})
	if ErrorMessageOf(err) != "agent 4: cannot reach kin" {
		t.Errorf("one failure of two: %v, want it to name agent 4", err)
	}
}
