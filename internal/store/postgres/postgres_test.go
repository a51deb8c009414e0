package postgres_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/internal/pgtest"
	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/internal/store/postgres"
	"github.com/kin-agents/kin/internal/store/storetest"
	"github.com/kin-agents/kin/kin"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

func TestPostgresStore(t *testing.T) {
	storetest.Exercise(t, func(t *testing.T) (store.Store, func() store.Store) {
		dsn := pgtest.NewDatabase(t)
		open := func() store.Store {
			s, err := postgres.Open(context.Background(), dsn, postgres.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		}
		return open(), open
	})
}

// TestConnectionsLostAndFound: the server ends every connection of the
// store's database (a failover, a restart, an administrator's
// pg_terminate_backend). The next Updates and reads work again without
// reopening the store, and the listener comes back: another handle's
// commit still wakes this handle's waiters.
func TestConnectionsLostAndFound(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.NewDatabase(t)
	open := func() store.Store {
		s, err := postgres.Open(ctx, dsn, postgres.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	a, b := open(), open()
	storetest.AppendEvents(t, a, 0, 3, nil)
	if _, err := a.AgentCount(ctx); err != nil {
		t.Fatal(err)
	}
	admin, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	var ended int
	if err := admin.QueryRowContext(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&ended); err != nil {
		t.Fatal(err)
	}
	if ended < 4 { // each handle: its writer, a reader, its listener
		t.Fatalf("ended %d connections, want at least 4", ended)
	}
	// Writes and reads work at once: the writer begins again on a new
	// connection, and the read pool drops the dead ones.
	if _, err := storetest.AppendEvents(t, a, 3, 4, nil); err != nil {
		t.Fatalf("the first Update after the connections ended: %v", err)
	}
	if _, err := a.AgentCount(ctx); err != nil {
		t.Fatalf("the first read after the connections ended: %v", err)
	}
	if _, err := b.AgentCount(ctx); err != nil {
		t.Fatalf("the first read of the other handle: %v", err)
	}
	// The listener is back: b's commit wakes a's waiters.
	kintest.WaitFor(t, 10*time.Second, "b's commit to wake a's waiter", func() bool {
		ch := a.Wait()
		if _, err := storetest.AppendEvents(t, b, 0, 1, nil); err != nil {
			return false
		}
		select {
		case <-ch:
			return true
		case <-time.After(2 * time.Second):
			return false
		}
	})
}

// TestDeferrableInsertIsHeld: in a deferrable Update the agent insert is
// held for the next statement rather than sent at once, so a clash is
// learnt only once fn has returned, and fn runs again with the insert sent
// at once to see it as ErrNameTaken. A plain Update's fn runs once.
func TestDeferrableInsertIsHeld(t *testing.T) {
	ctx := context.Background()
	s, err := postgres.Open(ctx, pgtest.NewDatabase(t), postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	storetest.Insert(t, s, "taken", 0)
	for _, deferred := range []bool{false, true} {
		runs := 0
		fn := func(tx store.Tx) error {
			runs++
			_, err := tx.AgentInsert(ctx, store.AgentInsertParams{Agent: storetest.NewAgent("taken", 0, 0)})
			return err
		}
		if deferred {
			err = store.UpdateDeferrable(ctx, s, fn)
		} else {
			err = s.Update(ctx, fn)
		}
		want := 1
		if deferred {
			want = 2
		}
		if !errors.Is(err, store.ErrNameTaken) || runs != want {
			t.Errorf("deferrable %v: %v after %d runs; want %v after %d", deferred, err, runs, store.ErrNameTaken, want)
		}
	}
	a := storetest.Insert(t, s, "next", 0)
	if a.ID != 2 {
		t.Fatalf("the next agent has id %d, want 2: no gap", a.ID)
	}
	// A registration (the parent's row, the insert, an event) alone in
	// its batch: held, its insert goes with the batch's events, one round
	// trip to the server fewer.
	trips := map[bool]int64{}
	for i, deferred := range []bool{false, true} {
		fn := func(tx store.Tx) error {
			if _, err := tx.AgentGetByID(ctx, a.ID); err != nil {
				return err
			}
			got, err := tx.AgentInsert(ctx, store.AgentInsertParams{Agent: storetest.NewAgent(fmt.Sprintf("child%d", i), a.ID, 1)})
			if err != nil {
				return err
			}
			e, err := kin.NewEvent(kin.EventAgentRegistered, got.ID, a.ID, map[string]any{"agent": got.ID})
			if err == nil {
				_, err = tx.EventAppend(ctx, e)
			}
			return err
		}
		before := s.WriterRoundTrips()
		if deferred {
			err = store.UpdateDeferrable(ctx, s, fn)
		} else {
			err = s.Update(ctx, fn)
		}
		if err != nil {
			t.Fatal(err)
		}
		trips[deferred] = s.WriterRoundTrips() - before
	}
	if trips[true] != trips[false]-1 {
		t.Fatalf("a registration took %d round trips, %d deferrable; want one fewer", trips[false], trips[true])
	}
}

// TestRememberedChainTakesNoRoundTrip: a deferrable registration whose
// parent's chain the writer read before takes one round trip to the
// server fewer than the first (sqlstore's speculate.go: the chain is
// answered from memory, its check sent with the batch's events), and
// reads the same chain.
func TestRememberedChainTakesNoRoundTrip(t *testing.T) {
	ctx := context.Background()
	s, err := postgres.Open(ctx, pgtest.NewDatabase(t), postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	parent := storetest.Insert(t, s, "parent", 0)
	var trips [2]int64
	var chains [2][]store.PermRow
	for i := range 2 {
		before := s.WriterRoundTrips()
		err := store.UpdateDeferrable(ctx, s, func(tx store.Tx) error {
			chain, err := tx.PermChain(ctx, parent.ID)
			if err != nil {
				return err
			}
			chains[i] = chain
			got, err := tx.AgentInsert(ctx, store.AgentInsertParams{Agent: storetest.NewAgent(fmt.Sprintf("child%d", i), parent.ID, 1)})
			if err != nil {
				return err
			}
			e, err := kin.NewEvent(kin.EventAgentRegistered, got.ID, parent.ID, map[string]any{"agent": got.ID})
			if err == nil {
				_, err = tx.EventAppend(ctx, e)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		trips[i] = s.WriterRoundTrips() - before
	}
	if trips[1] != trips[0]-1 {
		t.Errorf("the registration under a remembered chain took %d round trips, the first %d; want one fewer", trips[1], trips[0])
	}
	if len(chains[0]) != 1 || chains[0][0].Agent == nil || !reflect.DeepEqual(chains[0], chains[1]) {
		t.Errorf("the remembered chain %+v, the chain read %+v; want the same, of the parent", chains[1], chains[0])
	}
}
