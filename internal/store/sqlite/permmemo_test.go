package sqlite_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/internal/store/sqlite"
	"github.com/kin-agents/kin/internal/store/storetest"
	"github.com/kin-agents/kin/kin"
)

// openOnly opens a store as its file's only writer (the daemon's kin.db),
// whose writer keeps the permission rows it read (sqlstore's permmemo.go).
func openOnly(t *testing.T, path string) *sqlite.Store {
	t.Helper()
	return openWith(t, path, sqlite.Options{Synchronous: "NORMAL", OnlyWriter: true})
}

// TestSQLiteStoreOnlyWriter runs the suite's one-handle tests on a store
// that is its file's only writer.
func TestSQLiteStoreOnlyWriter(t *testing.T) {
	storetest.ExerciseOneHandle(t, func(t *testing.T) (store.Store, func() store.Store) {
		return openOnly(t, filepath.Join(t.TempDir(), "kin.db")), nil
	})
}

// TestWriterPermRowsNeverStale: the only writer answers permission chains
// from the rows it read before (permmemo.go); after any mix of writes to
// agents' rows and spend (spawns, usage, exhaustion, new agents, updates
// undone, concurrent Updates batched together), every chain it answers in
// a transaction is the one the database holds: the same as a read from the
// read pool after the commit, and, inside a transaction that wrote, what
// the transaction's own rows say.
func TestWriterPermRowsNeverStale(t *testing.T) {
	ctx := context.Background()
	s := openOnly(t, filepath.Join(t.TempDir(), "kin.db"))
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewPCG(uint64(seed), 22))
	t.Logf("seed %d", seed)

	var mu sync.Mutex
	var ids []kin.AgentID
	var names atomic.Int64
	insert := func(tx store.Tx, parent, requestedBy kin.AgentID) (*kin.Agent, error) {
		gen := 0
		if parent != 0 {
			p, err := tx.AgentGetByID(ctx, parent)
			if err != nil {
				return nil, err
			}
			gen = p.Generation + 1
		}
		a := storetest.NewAgent(fmt.Sprintf("a%d", names.Add(1)), parent, gen)
		a.RequestedBy = requestedBy
		var pol []byte
		if names.Load()%3 == 0 {
			pol = []byte(`{"budget":{"max_spawns":` + fmt.Sprint(names.Load()) + `}}`)
		}
		return tx.AgentInsert(ctx, store.AgentInsertParams{Agent: a, Policy: pol})
	}
	// The tree: two roots, a chain under the first, an escalated agent
	// (asked for by its parent's child) and a child of it.
	err := s.Update(ctx, func(tx store.Tx) error {
		var prev kin.AgentID
		for i := range 5 {
			parent := prev
			if i == 1 {
				parent = 0 // a second root
			}
			a, err := insert(tx, parent, 0)
			if err != nil {
				return err
			}
			ids = append(ids, a.ID)
			if i != 1 {
				prev = a.ID
			}
		}
		w, err := insert(tx, ids[2], ids[3]) // parent ids[2], asked for by ids[3], its child
		if err != nil {
			return err
		}
		c, err := insert(tx, w.ID, 0)
		if err != nil {
			return err
		}
		ids = append(ids, w.ID, c.ID)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	pick := func(r *rand.Rand) kin.AgentID {
		mu.Lock()
		defer mu.Unlock()
		return ids[r.IntN(len(ids))]
	}
	// write makes one random write of the kinds that change chains; an
	// agent it inserts is added to ids once its Update committed (kept).
	var added []kin.AgentID // by the running Update (one at a time outside the concurrent part)
	write := func(r *rand.Rand, tx store.Tx, keep *[]kin.AgentID) error {
		at := time.Unix(1_900_000_000, r.Int64N(1e9))
		switch r.IntN(7) {
		case 0:
			stage := fmt.Sprintf("stage-%d", r.IntN(3))
			return tx.AgentUpdate(ctx, store.AgentUpdateParams{ID: pick(r), At: at, Stage: &stage})
		case 1:
			status := []kin.Status{kin.StatusActive, kin.StatusSuspended}[r.IntN(2)]
			return tx.AgentUpdateStatus(ctx, store.AgentUpdateStatusParams{ID: pick(r), Status: status, At: at})
		case 2:
			return tx.SpendSpawnAdd(ctx, []kin.AgentID{pick(r), pick(r), pick(r)}) // a repeat counts twice
		case 3:
			return tx.SpendAdd(ctx, pick(r), r.Int64N(100), float64(r.IntN(100))/8)
		case 4:
			return tx.SpendSetExhausted(ctx, pick(r), fmt.Sprintf("spent %d", r.IntN(10)))
		case 5:
			state := kin.State("working")
			return tx.AgentUpdateMany(ctx, []kin.AgentID{pick(r), pick(r)}, store.AgentUpdateParams{At: at, State: &state})
		default:
			a, err := insert(tx, pick(r), 0)
			if err == nil {
				*keep = append((*keep)[:0], a.ID)
			}
			return err
		}
	}
	// check reads every agent's chain from the read pool (the database's
	// rows), then in one Update from the writer (its memory where it holds
	// the rows), and compares them.
	check := func(step string) {
		t.Helper()
		mu.Lock()
		all := append([]kin.AgentID(nil), ids...)
		mu.Unlock()
		want := map[kin.AgentID][]store.PermRow{}
		for _, id := range all {
			c, err := s.PermChain(ctx, id)
			if err != nil {
				t.Fatalf("%s: read pool chain of %d: %v", step, id, err)
			}
			want[id] = c
		}
		err := s.Update(ctx, func(tx store.Tx) error {
			for _, id := range all {
				got, err := tx.PermChain(ctx, id)
				if err != nil {
					return err
				}
				if !reflect.DeepEqual(got, want[id]) {
					return fmt.Errorf("agent %d's chain in the writer:\n%+v\nin the database:\n%+v", id, got, want[id])
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
	}
	check("the tree")
	check("the tree again (answered from memory)")

	// committed adds what the committed Update inserted to ids.
	committed := func(keep *[]kin.AgentID) {
		mu.Lock()
		ids = append(ids, *keep...)
		mu.Unlock()
		*keep = (*keep)[:0]
	}
	errUndone := errors.New("undone")
	for i := range 300 {
		step := fmt.Sprintf("step %d", i)
		switch rng.IntN(3) {
		case 0: // a write, committed
			added = added[:0]
			if err := s.Update(ctx, func(tx store.Tx) error { return write(rng, tx, &added) }); err != nil {
				t.Fatalf("%s: %v", step, err)
			}
			committed(&added)
		case 1: // chains read, a write, chains read again, all undone
			err := s.Update(ctx, func(tx store.Tx) error {
				if _, err := tx.PermChain(ctx, pick(rng)); err != nil {
					return err
				}
				if err := write(rng, tx, &added); err != nil {
					return err
				}
				if _, err := tx.PermChain(ctx, pick(rng)); err != nil {
					return err
				}
				return errUndone
			})
			if !errors.Is(err, errUndone) {
				t.Fatalf("%s: the undone update: %v", step, err)
			}
		default: // a write, then the chain as the transaction sees it
			added = added[:0]
			err := s.Update(ctx, func(tx store.Tx) error {
				id := pick(rng)
				before, err := tx.PermChain(ctx, id)
				if err != nil {
					return err
				}
				if err := write(rng, tx, &added); err != nil {
					return err
				}
				got, err := tx.PermChain(ctx, id)
				if err != nil {
					return err
				}
				want, err := chainOfRows(ctx, tx, id, before)
				if err != nil {
					return err
				}
				if !reflect.DeepEqual(got, want) {
					return fmt.Errorf("agent %d's chain after a write in the same transaction:\n%+v\nits rows say:\n%+v", id, got, want)
				}
				return nil
			})
			if err != nil {
				t.Fatalf("%s: %v", step, err)
			}
			committed(&added)
		}
		check(step)
	}

	// Concurrent Updates, batched by the writer, some undone.
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(seed), uint64(g)))
			var mine []kin.AgentID
			for range 40 {
				mine = mine[:0] // an Update run again starts over
				err := s.Update(ctx, func(tx store.Tx) error {
					mine = mine[:0]
					if _, err := tx.PermChain(ctx, pick(r)); err != nil {
						return err
					}
					if err := write(r, tx, &mine); err != nil {
						return err
					}
					if r.IntN(4) == 0 {
						return errUndone
					}
					return nil
				})
				if err != nil && !errors.Is(err, errUndone) {
					errs <- err
					return
				}
				if err == nil {
					committed(&mine)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a concurrent update: %v", err)
	}
	check("after the concurrent updates")
}

// chainOfRows is id's permission chain as tx's rows say it, one row at a
// time (AgentGetByID and SpendList, which no memory answers), with each
// row's policy and deadline, which no update changes, from before (the
// same chain read earlier in tx).
func chainOfRows(ctx context.Context, tx store.Tx, id kin.AgentID, before []store.PermRow) ([]store.PermRow, error) {
	spends, err := tx.SpendList(ctx)
	if err != nil {
		return nil, err
	}
	spend := map[kin.AgentID]store.SpendRow{}
	for _, s := range spends {
		spend[s.ID] = s
	}
	fixed := map[kin.AgentID]store.PermRow{}
	for _, r := range before {
		fixed[r.ID] = r
	}
	var out []store.PermRow
	for next := id; ; {
		a, err := tx.AgentGetByID(ctx, next)
		if errors.Is(err, store.ErrNotFound) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		r := store.PermRow{ID: a.ID, Parent: a.Parent, RequestedBy: a.RequestedBy, Role: a.Role, Stage: a.Stage,
			Policy: fixed[a.ID].Policy, DeadlineAt: fixed[a.ID].DeadlineAt, Spend: spend[a.ID]}
		r.Spend.ID = a.ID
		if len(out) == 0 {
			r.Agent = a
		}
		out = append(out, r)
		if a.Parent == 0 {
			return out, nil
		}
		next = a.Parent
		if a.RequestedBy != 0 {
			next = a.RequestedBy
		}
	}
}

// TestWriterPermRowsAfterFailedWrites: a write that fails inside an Update
// the caller still commits (its error ignored) may have changed some rows
// (AgentUpdateMany's existing ids, before it reports a missing one) or
// none (a statement SQLite undid whole: a spend row for no agent, a live
// name taken twice); either way the chains the writer answers afterwards,
// in the same transaction and after its commit, are the database's.
func TestWriterPermRowsAfterFailedWrites(t *testing.T) {
	ctx := context.Background()
	s := openOnly(t, filepath.Join(t.TempDir(), "kin.db"))
	const missing = kin.AgentID(1 << 40)
	var root, mid, leaf, old kin.AgentID
	err := s.Update(ctx, func(tx store.Tx) error {
		add := func(name string, parent kin.AgentID, gen int, pol string) (kin.AgentID, error) {
			a, err := tx.AgentInsert(ctx, store.AgentInsertParams{Agent: storetest.NewAgent(name, parent, gen), Policy: []byte(pol)})
			if err != nil {
				return 0, err
			}
			return a.ID, nil
		}
		var err error
		if root, err = add("root", 0, 0, `{"budget":{"max_descendants":10}}`); err != nil {
			return err
		}
		if mid, err = add("mid", root, 1, ""); err != nil {
			return err
		}
		if leaf, err = add("leaf", mid, 2, ""); err != nil {
			return err
		}
		if old, err = add("twin", mid, 2, ""); err != nil {
			return err
		}
		// A terminated "twin" and a live one: old's return to active
		// breaks the unique index of live names.
		if err := tx.AgentUpdateStatus(ctx, store.AgentUpdateStatusParams{ID: old, Status: kin.StatusTerminated, At: time.Unix(1_900_000_000, 0)}); err != nil {
			return err
		}
		_, err = add("twin", mid, 2, "")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	all := []kin.AgentID{root, mid, leaf, old}
	at := time.Unix(1_900_000_001, 0)
	stage, state := "promoted", kin.State("working")
	failing := []struct {
		name  string
		write func(tx store.Tx) error
	}{
		{"AgentUpdateMany with a missing id", func(tx store.Tx) error {
			return tx.AgentUpdateMany(ctx, []kin.AgentID{mid, missing, leaf}, store.AgentUpdateParams{At: at, Stage: &stage, State: &state})
		}},
		{"SpendSpawnAdd with a missing id", func(tx store.Tx) error {
			return tx.SpendSpawnAdd(ctx, []kin.AgentID{leaf, mid, missing, root})
		}},
		{"SpendAdd of a missing agent", func(tx store.Tx) error { return tx.SpendAdd(ctx, missing, 10, 0.5) }},
		{"SpendSetExhausted of a missing agent", func(tx store.Tx) error { return tx.SpendSetExhausted(ctx, missing, "spent") }},
		{"AgentUpdate of a missing agent", func(tx store.Tx) error {
			return tx.AgentUpdate(ctx, store.AgentUpdateParams{ID: missing, At: at, Stage: &stage})
		}},
		{"AgentUpdateStatus to a taken live name", func(tx store.Tx) error {
			return tx.AgentUpdateStatus(ctx, store.AgentUpdateStatusParams{ID: old, Status: kin.StatusActive, At: at})
		}},
	}
	for _, f := range failing {
		// A spend and a spawn first, so that a write undone whole has
		// counters to take back with it.
		err := s.Update(ctx, func(tx store.Tx) error {
			before := map[kin.AgentID][]store.PermRow{}
			for _, id := range all {
				c, err := tx.PermChain(ctx, id)
				if err != nil {
					return err
				}
				before[id] = c
			}
			if err := tx.SpendAdd(ctx, leaf, 7, 0.25); err != nil {
				return err
			}
			if err := tx.SpendSpawnAdd(ctx, []kin.AgentID{root}); err != nil {
				return err
			}
			for _, id := range all {
				if _, err := tx.PermChain(ctx, id); err != nil {
					return err
				}
			}
			if err := f.write(tx); err == nil {
				return fmt.Errorf("%s did not fail", f.name)
			}
			for _, id := range all {
				got, err := tx.PermChain(ctx, id)
				if err != nil {
					return err
				}
				want, err := chainOfRows(ctx, tx, id, before[id])
				if err != nil {
					return err
				}
				if !reflect.DeepEqual(got, want) {
					return fmt.Errorf("after %s, agent %d's chain in the transaction:\n%+v\nits rows say:\n%+v", f.name, id, got, want)
				}
			}
			return nil // committed, the failed write's error ignored
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range all {
			want, err := s.PermChain(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			var got []store.PermRow
			if err := s.Update(ctx, func(tx store.Tx) error {
				got, err = tx.PermChain(ctx, id)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("after %s committed, agent %d's chain in the writer:\n%+v\nin the database:\n%+v", f.name, id, got, want)
			}
		}
	}
}
