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
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/kin-agents/kin/internal/caller"
	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/kin"
)

// DefaultLease is how long a host's lease runs unless renewed. It is
// renewed every third of it.
const DefaultLease = 15 * time.Second

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
	Clock   func() time.Time
	Log     *slog.Logger
	// Lost is called (once) when the lease is lost: another home took the
	// name after it expired, or it expired while the store was out of
	// reach. Nil: the loss is only logged.
	Lost func(error)
}

// Hosts is this daemon's host. Make it with New (which takes the lease),
// Start its renewal, Close it (which releases the lease).
type Hosts struct {
	cfg     Config
	id      string // the home's id
	mu      sync.Mutex
	row     store.HostRow // what was claimed (under mu)
	stop    chan struct{}
	done    chan struct{}
	started bool // under mu
	lost    sync.Once
	once    sync.Once
}

// New reads (or makes) the home's id and takes the name's lease. It fails,
// naming the fix, when another daemon holds the name.
func New(ctx context.Context, cfg Config) (*Hosts, error) {
	if err := kin.ValidateHostName(cfg.Name); err != nil {
		return nil, err
	}
	if cfg.Lease <= 0 {
		cfg.Lease = DefaultLease
	}
	if cfg.Clock == nil {
		cfg.Clock = func() time.Time { return time.Now().UTC() }
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	id, err := homeID(cfg.Home)
	if err != nil {
		return nil, err
	}
	now := cfg.Clock()
	h := &Hosts{cfg: cfg, id: id, stop: make(chan struct{}), done: make(chan struct{}),
		row: store.HostRow{Name: cfg.Name, Home: id, Version: cfg.Version, StartedAt: now}}
	if err := h.claim(ctx); err != nil {
		return nil, err
	}
	return h, nil
}

// Name is the host's name.
func (h *Hosts) Name() string { return h.cfg.Name }

// Announce records what the host says of itself once it serves: its HTTP
// address and containment.
func (h *Hosts) Announce(ctx context.Context, address, containment string) error {
	h.mu.Lock()
	h.row.Address, h.row.Containment = address, containment
	h.mu.Unlock()
	return h.claim(ctx)
}

func (h *Hosts) claim(ctx context.Context) error {
	now := h.cfg.Clock()
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
	return nil
}

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

// Start renews the lease every third of its length until Close.
func (h *Hosts) Start() {
	h.mu.Lock()
	h.started = true
	h.mu.Unlock()
	go h.renewLoop()
}

func (h *Hosts) renewLoop() {
	defer close(h.done)
	t := time.NewTicker(h.cfg.Lease / 3)
	defer t.Stop()
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

// renew moves the lease on. Losing it (another home took the name) or
// letting it expire (the store out of reach past the lease) calls Lost.
func (h *Hosts) renew() error {
	ctx, cancel := context.WithTimeout(context.Background(), h.cfg.Lease/3)
	defer cancel()
	now := h.cfg.Clock()
	err := h.cfg.Store.Update(ctx, func(tx store.Tx) error {
		return tx.HostRenew(ctx, h.cfg.Name, h.id, now, now.Add(h.cfg.Lease))
	})
	h.mu.Lock()
	if err == nil {
		h.row.RenewedAt, h.row.LeaseUntil = now, now.Add(h.cfg.Lease)
	}
	until := h.row.LeaseUntil
	h.mu.Unlock()
	switch {
	case errors.Is(err, store.ErrNotFound):
		h.lose(fmt.Errorf("host %s: another home took its name", h.cfg.Name))
	case err != nil && !now.Before(until):
		h.lose(fmt.Errorf("host %s: its lease expired at %s without renewal: %w", h.cfg.Name, until.Format(time.RFC3339), err))
	}
	return err
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
		out[i] = kin.Host{Name: r.Name, Live: r.LeaseUntil.After(now), Self: r.Name == h.cfg.Name && r.Home == h.id,
			Address: r.Address, Containment: r.Containment, Version: r.Version,
			StartedAt: r.StartedAt, RenewedAt: r.RenewedAt, LeaseUntil: r.LeaseUntil, Agents: r.Agents}
	}
	return out, nil
}

// homeID reads the home's id, making it at the first start.
func homeID(home string) (string, error) {
	path := filepath.Join(home, idFile)
	if b, err := os.ReadFile(path); err == nil {
		id := strings.TrimSpace(string(b))
		if len(id) < 16 {
			return "", fmt.Errorf("host id %s is damaged (%q); remove it to have a new one made", path, id)
		}
		return id, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("host id: %w", err)
	}
	buf := make([]byte, 16)
	if _, err := rand.Read(buf); err != nil {
		return "", err
	}
	id := hex.EncodeToString(buf)
	if err := os.WriteFile(path, []byte(id+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("host id: %w", err)
	}
	return id, nil
}
