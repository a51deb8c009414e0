// Package hosts is this daemon as a host of the fleet (seed 002: one host
// orchestrator per machine, every one on the shared store): its name, the
// lease it holds on that name in the store's hosts table and renews (the
// heartbeat at host level), and the list of every host with its lease.
//
// A name is held by a home, not by a process: the home's id (the file
// host-id, made at the first start) is what the lease records. A daemon
// restarted on the same home (kin.lock allows one at a time) takes its
// name back at once, even while a lease its killed predecessor took still
// runs; a daemon on another home is refused the name until that lease
// has ended (a clean stop releases it at once). So two daemons never run
// as one host.
package hosts

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/kin-agents/kin/internal/caller"
	"github.com/kin-agents/kin/internal/keyring"
	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/kin"
)

// DefaultLease is how long a host's lease runs unless renewed. It is
// renewed every third of it.
const DefaultLease = 15 * time.Second

// DefaultFenceAfter is how long a host goes on without renewing its lease
// before it fences itself (stops or freezes its agents), like Nomad's
// stop_on_client_after; with a lease of more than half of it, twice the
// lease is the default.
const DefaultFenceAfter = 30 * time.Second

// CheckTimes reports a clear error for a fence-after (0: the default)
// that is not longer than the lease (0: DefaultLease): a host would fence
// itself while its lease still ran.
func CheckTimes(lease, fenceAfter time.Duration) error {
	if fenceAfter == 0 {
		return nil
	}
	if lease == 0 {
		lease = DefaultLease
	}
	if fenceAfter <= lease {
		return fmt.Errorf("fence-after %s must be longer than the host lease %s: a host fences itself only once its lease has run out unrenewed", fenceAfter, lease)
	}
	return nil
}

// fenceAfterFor is the fence-after a lease gets when none is given.
func fenceAfterFor(lease time.Duration) time.Duration {
	return max(DefaultFenceAfter, 2*lease)
}

// idFile is the home's id, which the lease names.
const idFile = "host-id"

// Config is what a host needs.
type Config struct {
	Store store.Store
	// Name is the host's name in the fleet (kin serve --host-name).
	Name string
	// Home is the daemon's home, where its id is kept.
	Home string
	// Lease is how long the lease runs unless renewed (DefaultLease if 0).
	Lease   time.Duration
	Version string
	// Clock is the time the lease records (a test's clock may jump).
	Clock func() time.Time
	// FenceClock is the time the fence timer counts in: the machine's
	// (monotonic) unless a test injects one. It is not Clock, so that a
	// test that moves the daemon's clock by an hour does not fence it.
	FenceClock func() time.Time
	Log        *slog.Logger
	// Lost is called (once) when the lease is lost for good: another home
	// took the name after it expired. Nil: the loss is only logged.
	Lost func(error)
	// FenceAfter is how long the host goes on without a renewal of its
	// lease (the store out of reach) before Fence is called: longer than
	// Lease (0: the larger of DefaultFenceAfter and twice the lease).
	FenceAfter time.Duration
	// Fence is called once FenceAfter has passed since the start of the
	// last renewal that succeeded, and again only after a Rejoin. It must
	// not wait on the store. Nil: the fence is only logged.
	Fence func()
	// Rejoin is called when a renewal succeeds after the lease had run
	// out (or after Fence: fenced says which): the host holds its name
	// again and records what happened meanwhile. It is called on a
	// goroutine of its own, one at a time.
	Rejoin func(fenced bool)
}

// Hosts is this daemon's host. Make it with New (which takes the lease),
// Start its renewal, Close it (which releases the lease).
type Hosts struct {
	cfg      Config
	id       string // the home's id
	mu       sync.Mutex
	row      store.HostRow // what was claimed (under mu)
	stop     chan struct{}
	done     chan struct{}
	started  bool // under mu
	announce bool // under mu: Announce was called; the first renewal claims with its details
	// renewed is when the last renewal (or claim) that succeeded began
	// (by FenceClock), fenced whether Fence was called since; both under mu. kick wakes
	// the fence timer after a renewal.
	renewed time.Time
	fenced  bool
	kick    chan struct{}
	rejoin  sync.Mutex     // one Rejoin at a time
	rejoins sync.WaitGroup // Close waits for them
	lost    sync.Once
	once    sync.Once
}

// New reads (or makes) the home's id and takes the name's lease. It fails,
// naming the fix, when another daemon holds the name.
func New(ctx context.Context, cfg Config) (*Hosts, error) {
	if err := kin.ValidateHostName(cfg.Name); err != nil {
		return nil, err
	}
	if err := CheckTimes(cfg.Lease, cfg.FenceAfter); err != nil {
		return nil, err
	}
	if cfg.Lease <= 0 {
		cfg.Lease = DefaultLease
	}
	if cfg.FenceAfter <= 0 {
		cfg.FenceAfter = fenceAfterFor(cfg.Lease)
	}
	if cfg.Clock == nil {
		cfg.Clock = func() time.Time { return time.Now().UTC() }
	}
	if cfg.FenceClock == nil {
		cfg.FenceClock = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	id, err := homeID(cfg.Home)
	if err != nil {
		return nil, err
	}
	now := cfg.Clock()
	h := &Hosts{cfg: cfg, id: id, stop: make(chan struct{}), done: make(chan struct{}), kick: make(chan struct{}, 1),
		row: store.HostRow{Name: cfg.Name, Home: id, Version: cfg.Version, StartedAt: now}}
	if err := h.claim(ctx); err != nil {
		return nil, err
	}
	return h, nil
}

// Name is the host's name.
func (h *Hosts) Name() string { return h.cfg.Name }

// Announce records what the host says of itself once it serves: its HTTP
// address and containment. Start's renewal writes them first thing, in
// the background: a daemon starting must not wait on the store's writer,
// which a restart's reconciliation may hold.
func (h *Hosts) Announce(address, containment string) {
	h.mu.Lock()
	h.row.Address, h.row.Containment = address, containment
	h.announce = true
	h.mu.Unlock()
}

func (h *Hosts) claim(ctx context.Context) error {
	now, began := h.cfg.Clock(), h.cfg.FenceClock()
	h.mu.Lock()
	row := h.row
	h.mu.Unlock()
	row.RenewedAt, row.LeaseUntil = now, now.Add(h.cfg.Lease)
	err := h.cfg.Store.Update(ctx, func(tx store.Tx) error { return tx.HostClaim(ctx, row) })
	if errors.Is(err, store.ErrHostTaken) {
		return h.taken(ctx)
	}
	if err != nil {
		return fmt.Errorf("host %s: %w", h.cfg.Name, err)
	}
	h.mu.Lock()
	h.row.RenewedAt, h.row.LeaseUntil = row.RenewedAt, row.LeaseUntil
	h.renewed = began
	h.mu.Unlock()
	return nil
}

// FenceAfter is how long the host goes on without renewing its lease
// before it fences itself.
func (h *Hosts) FenceAfter() time.Duration { return h.cfg.FenceAfter }

// Lease is how long the host's lease runs unless renewed.
func (h *Hosts) Lease() time.Duration { return h.cfg.Lease }

// taken is the error for a name another home holds.
func (h *Hosts) taken(ctx context.Context) error {
	var other store.HostRow
	if rows, err := h.cfg.Store.HostList(ctx); err == nil {
		for _, r := range rows {
			if r.Name == h.cfg.Name {
				other = r
			}
		}
	}
	where := ""
	if other.Address != "" {
		where = " at " + other.Address
	}
	return kin.Errorf(kin.ECodeConflict, "host name %q is held by another kin serve%s (another home; its lease runs until %s): "+
		"give this one its own --host-name (or KIN_HOST_NAME), or stop that one", h.cfg.Name, where, other.LeaseUntil.Format(time.RFC3339))
}

// Start renews the lease every third of its length until Close, and
// fences the host when it could not for FenceAfter.
func (h *Hosts) Start() {
	h.mu.Lock()
	h.started = true
	h.mu.Unlock()
	fenceDone := make(chan struct{})
	go func() {
		defer close(fenceDone)
		h.fenceLoop()
	}()
	go func() {
		defer close(h.done)
		h.renewLoop()
		<-fenceDone
	}()
}

// fenceCheck bounds how long the fence timer sleeps between looks at the
// clock (Config.Clock may be a test's, which real timers do not follow).
const fenceCheck = 100 * time.Millisecond

// fenceLoop calls Fence once FenceAfter has passed since the start of the
// last renewal that succeeded. It never waits on the store: a renewal
// stuck on an unreachable store does not delay it.
func (h *Hosts) fenceLoop() {
	for {
		h.mu.Lock()
		due := h.renewed.Add(h.cfg.FenceAfter)
		fenced := h.fenced
		h.mu.Unlock()
		wait := fenceCheck
		if !fenced {
			now := h.cfg.FenceClock()
			if !now.Before(due) {
				h.fence(now, due)
				continue
			}
			wait = min(due.Sub(now), fenceCheck)
		}
		t := time.NewTimer(wait)
		select {
		case <-h.stop:
			t.Stop()
			return
		case <-h.kick:
			t.Stop()
		case <-t.C:
		}
	}
}

// fence marks the host fenced and calls Fence.
func (h *Hosts) fence(now, due time.Time) {
	h.mu.Lock()
	if h.fenced {
		h.mu.Unlock()
		return
	}
	h.fenced = true
	renewed := h.renewed
	h.mu.Unlock()
	h.cfg.Log.Error("host fenced: its lease was not renewed for fence-after (the store out of reach); its agents are stopped or frozen until it rejoins",
		"host", h.cfg.Name, "fence_after", h.cfg.FenceAfter.String(), "last_renewal", renewed.Format(time.RFC3339Nano), "late", now.Sub(due).String())
	if h.cfg.Fence != nil {
		h.cfg.Fence()
	}
}

// Fenced reports whether the host is fenced: its lease went unrenewed for
// FenceAfter and no renewal has succeeded since.
func (h *Hosts) Fenced() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.fenced
}

func (h *Hosts) renewLoop() {
	t := time.NewTicker(h.cfg.Lease / 3)
	defer t.Stop()
	h.mu.Lock()
	announce := h.announce
	h.mu.Unlock()
	if announce {
		ctx, cancel := context.WithTimeout(context.Background(), h.cfg.Lease/3)
		err := h.claim(ctx)
		cancel()
		switch {
		case kin.ErrorCodeOf(err) == kin.ECodeConflict:
			h.lose(err) // another home took the name since New
		case err != nil:
			h.cfg.Log.Error("host lease: announce", "host", h.cfg.Name, "err", err) // the next renewal keeps the lease
		}
	}
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
		}
		if err := h.renew(); err != nil {
			h.cfg.Log.Error("host lease", "host", h.cfg.Name, "err", err)
		}
	}
}

// renew moves the lease on. Losing it (another home took the name) calls
// Lost; a renewal that succeeds after the lease ran out, or after the host
// fenced itself, calls Rejoin.
func (h *Hosts) renew() error {
	ctx, cancel := context.WithTimeout(context.Background(), h.cfg.Lease/3)
	defer cancel()
	now, began := h.cfg.Clock(), h.cfg.FenceClock()
	err := h.cfg.Store.Update(ctx, func(tx store.Tx) error {
		return tx.HostRenew(ctx, h.cfg.Name, h.id, now, now.Add(h.cfg.Lease))
	})
	if errors.Is(err, store.ErrNotFound) {
		h.lose(fmt.Errorf("host %s: another home took its name", h.cfg.Name))
		return err
	}
	if err != nil {
		return err
	}
	h.mu.Lock()
	lapsed := began.Sub(h.renewed) > h.cfg.Lease // the lease ran out before this renewal began
	fenced := h.fenced
	h.row.RenewedAt, h.row.LeaseUntil = now, now.Add(h.cfg.Lease)
	h.renewed = began
	h.fenced = false
	h.mu.Unlock()
	select {
	case h.kick <- struct{}{}:
	default:
	}
	if lapsed || fenced {
		h.cfg.Log.Warn("host rejoined the fleet: its lease is renewed", "host", h.cfg.Name, "fenced", fenced)
		if h.cfg.Rejoin != nil {
			h.rejoins.Add(1)
			go func() {
				defer h.rejoins.Done()
				h.rejoin.Lock()
				defer h.rejoin.Unlock()
				h.cfg.Rejoin(fenced)
			}()
		}
	}
	return nil
}

func (h *Hosts) lose(err error) {
	h.lost.Do(func() {
		h.cfg.Log.Error("host lease lost", "host", h.cfg.Name, "err", err)
		if h.cfg.Lost != nil {
			h.cfg.Lost(err)
		}
	})
}

// Close stops renewing and releases the lease, so the name is free at once.
func (h *Hosts) Close() error {
	var err error
	h.once.Do(func() {
		close(h.stop)
		h.mu.Lock()
		started := h.started
		h.mu.Unlock()
		if started {
			<-h.done
		}
		h.rejoins.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err = h.cfg.Store.Update(ctx, func(tx store.Tx) error { return tx.HostRelease(ctx, h.cfg.Name, h.id) })
	})
	return err
}

// Hosts is every host of the fleet (operator only).
func (h *Hosts) Hosts(ctx context.Context) ([]kin.Host, error) {
	if err := caller.OperatorOnly(ctx, "list the fleet's hosts"); err != nil {
		return nil, err
	}
	rows, err := h.cfg.Store.HostList(ctx)
	if err != nil {
		return nil, store.KinError(err)
	}
	now := h.cfg.Clock()
	out := make([]kin.Host, len(rows))
	for i, r := range rows {
		out[i] = kin.Host{Name: r.Name, Live: r.Live(now), Self: r.Name == h.cfg.Name && r.Home == h.id,
			Address: r.Address, Containment: r.Containment, Version: r.Version,
			StartedAt: r.StartedAt, RenewedAt: r.RenewedAt, LeaseUntil: r.LeaseUntil, Agents: r.Agents}
	}
	return out, nil
}

// homeID reads the home's id, making it at the first start.
func homeID(home string) (string, error) {
	return keyring.Secret(filepath.Join(home, idFile), "host id", 16)
}
