package daemon_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/daemon"
	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/kin"
)

// earlyStore wraps a daemon's store so that an early Update's durability
// (store.EarlyDeferrer: a spawn's registration) is answered only once the
// test says how: visible is signalled when the Update returned (committed
// and visible), and its durable waits for a value on release, which it
// returns if not nil, else the store's own answer.
type earlyStore struct {
	store.Store
	visible chan struct{}
	release chan error
}

func (s earlyStore) UpdateEarlyDeferrable(ctx context.Context, fn func(store.Tx) error) (func() error, error) {
	durable, err := s.Store.(store.EarlyDeferrer).UpdateEarlyDeferrable(ctx, fn)
	if err != nil {
		return nil, err
	}
	s.visible <- struct{}{}
	return func() error {
		if err := <-s.release; err != nil {
			return err
		}
		return durable()
	}, nil
}

// TestSpawnStartsOnlyOnceRecordDurable: a spawn's registration is answered
// once visible, and its start makes the agent's socket and folders while it
// reaches the disk; but its process runs only once it is there. A
// registration that fails to reach the disk fails the spawn, with no
// process, and the agent is recorded as a failed start.
func TestSpawnStartsOnlyOnceRecordDurable(t *testing.T) {
	es := earlyStore{visible: make(chan struct{}, 1), release: make(chan error, 1)}
	d := kintest.StartDaemon(t, func(c *daemon.Config) {
		c.WrapStore = func(s store.Store) store.Store {
			if _, ok := s.(store.EarlyDeferrer); !ok {
				t.Skipf("the store (%T) commits no Update early", s)
			}
			es.Store = s
			return es
		}
	})
	svc := d.Daemon
	spawn := func(name string) (chan *kin.Agent, chan error) {
		out, errs := make(chan *kin.Agent, 1), make(chan error, 1)
		go func() {
			a, err := svc.Spawn(ctx, kin.SpawnRequest{
				RegisterRequest: kin.RegisterRequest{Name: name, Responsible: "t@example.org"},
				Command:         []string{"/bin/sleep", "3600"},
			})
			out <- a
			errs <- err
		}()
		select {
		case <-es.visible:
		case <-time.After(15 * time.Second):
			t.Fatalf("spawn %s: its registration was not committed", name)
		}
		return out, errs
	}
	// held waits until name's agent is visible and its socket made (the
	// start went on while the record is not durable), and checks that it
	// has no process.
	held := func(name string) *kin.Agent {
		t.Helper()
		var a *kin.Agent
		kintest.WaitFor(t, 15*time.Second, name+" visible with its socket", func() bool {
			as, err := svc.Agents(ctx, kin.AgentFilter{})
			for _, x := range as {
				if err == nil && x.Name == name {
					a = x
				}
			}
			if a == nil {
				return false
			}
			_, err = os.Stat(filepath.Join(d.Home, "ctx", "agent", name+".sock"))
			return err == nil
		})
		if a.PID != 0 || a.State != kin.StateRegistered {
			t.Fatalf("%s, its record not durable: pid %d, state %s; want no process yet", name, a.PID, a.State)
		}
		return a
	}

	// Not durable: the spawn fails, and no process ran.
	out, errs := spawn("undurable")
	a := held("undurable")
	injected := errors.New("injected: the disk refused the sync")
	es.release <- injected
	if got, err := <-out, <-errs; err == nil || got != nil {
		t.Fatalf("a spawn whose record never reached the disk: %+v, %v; want an error", got, err)
	}
	a = waitAgent(t, svc, a.ID, "recorded failed", stateIs(kin.StateFailed))
	if a.PID != 0 || a.EndReason != "start_failed" {
		t.Fatalf("after its record failed to reach the disk: pid %d, end %q; want no process, start_failed", a.PID, a.EndReason)
	}

	// Durable: the spawn answers once its process runs.
	out, errs = spawn("durable")
	held("durable")
	es.release <- nil
	got, err := <-out, <-errs
	if err != nil {
		t.Fatal(err)
	}
	if got.PID <= 0 || !alive(got.PID) {
		t.Fatalf("spawned: pid %d; want its process running", got.PID)
	}
}
