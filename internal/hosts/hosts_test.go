package hosts_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/hosts"
	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/internal/store/sqlite"
	"github.com/kin-agents/kin/kin"
)

// clock is a settable clock.
type clock struct{ ns atomic.Int64 }

func (c *clock) now() time.Time      { return time.Unix(0, c.ns.Load()).UTC() }
func (c *clock) add(d time.Duration) { c.ns.Add(int64(d)) }
func newClock() *clock {
	c := &clock{}
	c.ns.Store(time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC).UnixNano())
	return c
}
func openStore(t *testing.T) store.Store {
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "kin.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestLeaseRenewsAndIsLostToAnotherHome: a host renews its lease while it
// runs (its renewed_at moves on); when the lease lapsed and another home
// took the name, the next renewal finds it gone and calls Lost once.
func TestLeaseRenewsAndIsLostToAnotherHome(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	clk := newClock()
	lost := make(chan error, 2)
	const lease = 300 * time.Millisecond
	h, err := hosts.New(ctx, hosts.Config{Store: st, Name: "alpha", Home: t.TempDir(), Lease: lease, Clock: clk.now,
		Lost: func(err error) { lost <- err }})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	h.Start()
	first := renewedAt(t, st, "alpha")
	clk.add(time.Second)
	waitFor(t, "a renewal", func() bool { return renewedAt(t, st, "alpha").After(first) })
	// Another home, later, finds the lease lapsed (the clock ran past it)
	// and takes the name.
	clk.add(time.Minute)
	other, err := hosts.New(ctx, hosts.Config{Store: st, Name: "alpha", Home: t.TempDir(), Lease: time.Hour, Clock: clk.now})
	if err != nil {
		t.Fatalf("another home after the lease lapsed: %v", err)
	}
	defer other.Close()
	select {
	case err := <-lost:
		if !strings.Contains(err.Error(), "another home took its name") {
			t.Fatalf("lost: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the host never noticed it lost its name")
	}
	select {
	case err := <-lost:
		t.Fatalf("Lost called twice: %v", err)
	case <-time.After(2 * lease):
	}
}

// TestSameHomeTakesItsNameBack: a daemon restarted on its home (its
// predecessor killed, its lease still running) takes the name at once;
// another home is refused with the fix; a clean Close frees the name.
func TestSameHomeTakesItsNameBack(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	home := t.TempDir()
	cfg := hosts.Config{Store: st, Name: "alpha", Home: home, Lease: time.Hour}
	if _, err := hosts.New(ctx, cfg); err != nil { // killed: never closed
		t.Fatal(err)
	}
	again, err := hosts.New(ctx, cfg)
	if err != nil {
		t.Fatalf("the same home again: %v", err)
	}
	other := cfg
	other.Home = t.TempDir()
	_, err = hosts.New(ctx, other)
	if kin.ErrorCodeOf(err) != kin.ECodeConflict || !strings.Contains(err.Error(), "--host-name") {
		t.Fatalf("another home: %v", err)
	}
	if err := again.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := hosts.New(ctx, other); err != nil {
		t.Fatalf("another home after a clean close: %v", err)
	}
}

// TestBadHostNamesAndHomes: a bad name, or a damaged home id, is refused
// with what to do.
func TestBadHostNamesAndHomes(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	for _, name := range []string{"", "-a", "a b", "a/b", strings.Repeat("x", 64), "é"} {
		if _, err := hosts.New(ctx, hosts.Config{Store: st, Name: name, Home: t.TempDir()}); kin.ErrorCodeOf(err) != kin.ECodeInvalid {
			t.Errorf("host name %q: %v", name, err)
		}
	}
	home := t.TempDir()
	if err := os.WriteFile(filepath.Join(home, "host-id"), []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := hosts.New(ctx, hosts.Config{Store: st, Name: "ok", Home: home}); err == nil || !strings.Contains(err.Error(), "remove it") {
		t.Errorf("a damaged host id: %v", err)
	}
}

func renewedAt(t *testing.T, st store.Store, name string) time.Time {
	t.Helper()
	rows, err := st.HostList(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.Name == name {
			return r.RenewedAt
		}
	}
	t.Fatalf("no host %s", name)
	return time.Time{}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// flaky is a store whose Updates fail while it is down: a store out of
// reach (a mock of the network's failure; the real one is fleettest's).
type flaky struct {
	store.Store
	down atomic.Bool
}

func (f *flaky) Update(ctx context.Context, fn func(store.Tx) error) error {
	if f.down.Load() {
		return context.DeadlineExceeded
	}
	return f.Store.Update(ctx, fn)
}

// TestFenceTimerInjectedClock: a host whose renewals fail fences itself
// once fence-after has passed since the last renewal that succeeded (by
// its fence clock, not before), once; when a renewal succeeds again it rejoins
// (Rejoin(true)) and is no longer fenced. A lapse shorter than fence-after
// rejoins without a fence (Rejoin(false)).
func TestFenceTimerInjectedClock(t *testing.T) {
	ctx := context.Background()
	fs := &flaky{Store: openStore(t)}
	clk := newClock()
	fenced := make(chan time.Time, 4)
	rejoined := make(chan bool, 4)
	const lease, fenceAfter = 300 * time.Millisecond, 5 * time.Second
	h, err := hosts.New(ctx, hosts.Config{Store: fs, Name: "alpha", Home: t.TempDir(), Lease: lease, FenceAfter: fenceAfter, FenceClock: clk.now,
		Fence: func() { fenced <- clk.now() }, Rejoin: func(f bool) { rejoined <- f }})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	h.Start()
	start := clk.now()
	fs.down.Store(true)
	// Just short of fence-after: no fence (the timer looks at the clock
	// at least every 100 ms: give it several looks).
	clk.add(fenceAfter - time.Millisecond)
	select {
	case at := <-fenced:
		t.Fatalf("fenced at %s, before fence-after", at.Sub(start))
	case <-time.After(500 * time.Millisecond):
	}
	if h.Fenced() {
		t.Fatal("Fenced before fence-after")
	}
	clk.add(time.Millisecond)
	select {
	case at := <-fenced:
		if at.Sub(start) < fenceAfter {
			t.Fatalf("fenced %s after the last renewal, fence-after is %s", at.Sub(start), fenceAfter)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("never fenced")
	}
	if !h.Fenced() {
		t.Fatal("not Fenced after Fence")
	}
	clk.add(time.Minute)
	select {
	case <-fenced:
		t.Fatal("fenced twice without a rejoin")
	case <-time.After(500 * time.Millisecond):
	}
	// The store is back: the next renewal rejoins.
	fs.down.Store(false)
	select {
	case f := <-rejoined:
		if !f {
			t.Fatal("Rejoin(false) after a fence")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("never rejoined")
	}
	if h.Fenced() {
		t.Fatal("still Fenced after rejoining")
	}
	// A lapse past the lease but short of fence-after (the next renewal
	// begins after the lease ran out): a rejoin, no fence.
	clk.add(2 * lease)
	select {
	case f := <-rejoined:
		if f {
			t.Fatal("Rejoin(true) without a fence")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("never rejoined after a lapse")
	}
	select {
	case <-fenced:
		t.Fatal("fenced after a lapse shorter than fence-after")
	default:
	}
}

// TestFenceAfterMustExceedLease: a fence-after not longer than the lease
// is refused with a clear error.
func TestFenceAfterMustExceedLease(t *testing.T) {
	for _, c := range []struct {
		lease, fence time.Duration
		want         string
	}{
		{3 * time.Second, 3 * time.Second, "must be longer than the host lease"},
		{0, 10 * time.Second, "must be longer than the host lease 15s"},
	} {
		err := hosts.CheckTimes(c.lease, c.fence)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("CheckTimes(%s, %s) = %v, want %q", c.lease, c.fence, err, c.want)
		}
		if _, err := hosts.New(context.Background(), hosts.Config{Store: openStore(t), Name: "alpha", Home: t.TempDir(), Lease: c.lease, FenceAfter: c.fence}); err == nil {
			t.Errorf("New with lease %s, fence-after %s: no error", c.lease, c.fence)
		}
	}
	if err := hosts.CheckTimes(2*time.Second, 5*time.Second); err != nil {
		t.Fatal(err)
	}
}

// TestLeaseClockJumpDoesNotFence: the lease's clock (a daemon test's
// injected one) jumping by an hour fences nobody: the fence timer counts
// in the machine's time.
func TestLeaseClockJumpDoesNotFence(t *testing.T) {
	clk := newClock()
	fenced := make(chan struct{}, 1)
	h, err := hosts.New(context.Background(), hosts.Config{Store: openStore(t), Name: "alpha", Home: t.TempDir(), Lease: 300 * time.Millisecond,
		FenceAfter: time.Second, Clock: clk.now, Fence: func() { fenced <- struct{}{} }})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	h.Start()
	clk.add(time.Hour)
	select {
	case <-fenced:
		t.Fatal("fenced by a jump of the lease's clock")
	case <-time.After(1500 * time.Millisecond):
	}
}
