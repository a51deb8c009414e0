package postgres_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
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
	s, _ := openNew(t)
	var err error
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
			return register(ctx, tx, a.ID, fmt.Sprintf("child%d", i))
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

// TestEventsThatFailWithTheCommit: a batch's events go with its COMMIT, in
// one round trip. Should their insert fail (here a trigger the test adds
// refuses one event), the COMMIT is not run and every Update of the batch
// is told so: nothing of the batch is stored (a registration's agent, a
// metering's spend), the log is as it was, and the next batch appends to
// it without a gap.
func TestEventsThatFailWithTheCommit(t *testing.T) {
	ctx := context.Background()
	s, dsn := openNew(t)
	parent := storetest.Insert(t, s, "parent", 0)
	admin, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.ExecContext(ctx, `CREATE FUNCTION refuse_marked() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN IF NEW.type = 'test.refused' THEN RAISE EXCEPTION 'refused by the test'; END IF; RETURN NEW; END $$;
		CREATE TRIGGER refuse_marked BEFORE INSERT ON events FOR EACH ROW EXECUTE FUNCTION refuse_marked()`); err != nil {
		t.Fatal(err)
	}
	appendEvent := func(tx store.Tx, typ string, id kin.AgentID) error {
		return store.AppendEvent(ctx, tx, time.Now(), typ, id, parent.ID, map[string]any{"agent": id})
	}
	registerFn := func(name string) func(store.Tx) error {
		return func(tx store.Tx) error { return register(ctx, tx, parent.ID, name) }
	}
	meter := func(tx store.Tx) error {
		if err := tx.SpendAdd(ctx, parent.ID, 5, 0.25); err != nil {
			return err
		}
		if err := appendEvent(tx, "test.refused", parent.ID); err != nil {
			return err
		}
		_, err := tx.PermChain(ctx, parent.ID)
		return err
	}
	before, err := s.LogSize(ctx)
	if err != nil {
		t.Fatal(err)
	}

	// One batch: the writer is held by an Update while a registration
	// and a metering queue behind it.
	release, running := make(chan struct{}), make(chan struct{})
	held := make(chan error, 1)
	go func() {
		held <- s.Update(ctx, func(store.Tx) error { close(running); <-release; return nil })
	}()
	<-running
	errs := make(chan error, 2)
	go func() { errs <- store.UpdateDeferrable(ctx, s, registerFn("a")) }()
	kintest.WaitFor(t, 30*time.Second, "the registration to queue", func() bool { return s.Queued() == 1 })
	go func() { errs <- s.UpdateLazyDeferrable(ctx, meter) }()
	kintest.WaitFor(t, 30*time.Second, "the metering to queue", func() bool { return s.Queued() == 2 })
	close(release)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-errs; err == nil || !strings.Contains(err.Error(), "refused by the test") {
			t.Fatalf("an Update of the batch whose events were refused: %v, want the refusal", err)
		}
	}
	if _, err := s.AgentLiveByName(ctx, "a"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the refused batch's agent: %v, want not found", err)
	}
	chain, err := s.PermChain(ctx, parent.ID)
	if err != nil || chain[0].Spend.Tokens != 0 {
		t.Fatalf("the refused batch's spend: %+v, %v; want none", chain, err)
	}
	if n, err := s.LogSize(ctx); err != nil || n != before {
		t.Fatalf("log size %d, %v after the refused batch; want %d", n, err, before)
	}
	// The next batch: the agent gets the next id, its event the next seq.
	if err := store.UpdateDeferrable(ctx, s, registerFn("a")); err != nil {
		t.Fatal(err)
	}
	a, err := s.AgentLiveByName(ctx, "a")
	if err != nil || a.ID != parent.ID+1 {
		t.Fatalf("agent a: %+v, %v; want id %d", a, err, parent.ID+1)
	}
	if n, err := s.LogSize(ctx); err != nil || n != before+1 {
		t.Fatalf("log size %d, %v; want %d", n, err, before+1)
	}
	_, v := storetest.LogKey(t)
	storetest.WantOK(t, storetest.Verify(t, s, v, nil), before+1, 0)
}

// TestRememberedChainTakesNoRoundTrip: a deferrable registration whose
// parent's chain the writer read before takes one round trip to the
// server fewer than the first (sqlstore's speculate.go: the chain is
// answered from memory, its check sent with the batch's events), and
// reads the same chain.
func TestRememberedChainTakesNoRoundTrip(t *testing.T) {
	ctx := context.Background()
	s, _ := openNew(t)
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
			return register(ctx, tx, parent.ID, fmt.Sprintf("child%d", i))
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

// TestOwnRowWriteForgetsItsChain: this handle's own write of an agent's
// row forgets that agent's remembered chain (the chain holds the row
// whole), so the next registration under it reads the chain (one round
// trip) instead of taking the remembered one on trust and having its check
// fail (a rollback to its savepoint and the Update run again: more).
func TestOwnRowWriteForgetsItsChain(t *testing.T) {
	ctx := context.Background()
	s, _ := openNew(t)
	parent := storetest.Insert(t, s, "parent", 0)
	trips := func(name string) int64 {
		t.Helper()
		before := s.WriterRoundTrips()
		err := store.UpdateDeferrable(ctx, s, func(tx store.Tx) error {
			if _, err := tx.PermChain(ctx, parent.ID); err != nil {
				return err
			}
			return register(ctx, tx, parent.ID, name)
		})
		if err != nil {
			t.Fatal(err)
		}
		return s.WriterRoundTrips() - before
	}
	first := trips("child0") // reads the chain, remembers it
	running := kin.StateActive
	if err := s.Update(ctx, func(tx store.Tx) error {
		return tx.AgentUpdate(ctx, store.AgentUpdateParams{ID: parent.ID, At: time.Now(), State: &running})
	}); err != nil {
		t.Fatal(err)
	}
	if after := trips("child1"); after != first {
		t.Errorf("a registration after this handle wrote the parent's row took %d round trips, the first %d; want the same (the chain read again, not a failed check)", after, first)
	}
}

// register is a registration's writes in tx: name's row under parent and
// its agent.registered event.
func register(ctx context.Context, tx store.Tx, parent kin.AgentID, name string) error {
	a, err := tx.AgentInsert(ctx, store.AgentInsertParams{Agent: storetest.NewAgent(name, parent, 1)})
	if err != nil {
		return err
	}
	return store.AppendEvent(ctx, tx, time.Now(), kin.EventAgentRegistered, a.ID, parent, map[string]any{"agent": a.ID})
}

// openNew opens a store on a new database of the test's cluster, closed
// when the test ends, and returns it with the database's DSN.
func openNew(t *testing.T) (*postgres.Store, string) {
	t.Helper()
	dsn := pgtest.NewDatabase(t)
	s, err := postgres.Open(context.Background(), dsn, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, dsn
}
