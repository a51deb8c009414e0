package sqlite_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/internal/store/sqlite"
	"github.com/kin-agents/kin/internal/store/storetest"
	"github.com/kin-agents/kin/kin"
)

func open(t *testing.T, path string) *sqlite.Store {
	t.Helper()
	return openWith(t, path, sqlite.Options{})
}

// openWith opens the store at path with opts, closed when the test ends.
func openWith(t *testing.T, path string, opts sqlite.Options) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), path, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestSQLiteStore runs the suite; a second handle is a second Open of the
// same file in this process (TestSecondProcessAppends has a real second
// process).
func TestSQLiteStore(t *testing.T) {
	storetest.Exercise(t, func(t *testing.T) (store.Store, func() store.Store) {
		path := filepath.Join(t.TempDir(), "kin.db")
		return open(t, path), func() store.Store { return open(t, path) }
	})
}

func TestReopenKeepsEverything(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kin.db")
	s := open(t, path)
	r := storetest.Insert(t, s, "root", 0)
	storetest.Insert(t, s, "child", r.ID)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := open(t, path) // migrations run again and are a no-op
	anc, err := s2.AgentAncestors(context.Background(), 2)
	if err != nil || len(anc) != 2 {
		t.Fatalf("after reopen: %v, %v", anc, err)
	}
	next := storetest.Insert(t, s2, "third", 0)
	if next.ID != 3 {
		t.Fatalf("ids continue: got %d", next.ID)
	}
}

func TestOpenRejectsBadOptions(t *testing.T) {
	if _, err := sqlite.Open(context.Background(), "", sqlite.Options{}); err == nil {
		t.Error("empty path accepted")
	}
	if _, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "x.db"), sqlite.Options{Synchronous: "OFF"}); err == nil {
		t.Error("synchronous=OFF accepted")
	}
}

func TestDriverNamesFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kin.db")
	if got := open(t, path).Driver(); got != "sqlite:"+path {
		t.Errorf("Driver() = %q", got)
	}
}

// insertRoots inserts n root agents a0, a1, ... in one Update (ids 1 to n
// in a new store).
func insertRoots(t *testing.T, s store.Store, n int) {
	t.Helper()
	ctx := context.Background()
	err := s.Update(ctx, func(tx store.Tx) error {
		for i := range n {
			if _, err := tx.AgentInsert(ctx, store.AgentInsertParams{Agent: storetest.NewAgent(fmt.Sprintf("a%d", i), 0, 0)}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestAgentListByIDsLarge takes the parallel path (4096 ids and more) and
// checks every row comes back once, in the caller's order.
func TestAgentListByIDsLarge(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "kin.db"))
	ctx := context.Background()
	const n = 5000
	insertRoots(t, s, n)
	ids := make([]kin.AgentID, 0, n+1)
	for id := kin.AgentID(n); id >= 1; id-- {
		ids = append(ids, id)
	}
	ids = append(ids, n+7) // missing: left out
	got, err := s.AgentListByIDs(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != n {
		t.Fatalf("%d rows, want %d", len(got), n)
	}
	for i, a := range got {
		if a.ID != ids[i] || a.Name != fmt.Sprintf("a%d", a.ID-1) {
			t.Fatalf("row %d is %d %s, want %d", i, a.ID, a.Name, ids[i])
		}
	}
}

// TestLargeReadsLeaveNoMapping: a large read (4096 agents or more: a
// subtree's rows, a list by ids, the forest by ranges) maps the database
// file while it reads (sqlite.go's bulkMmap), and no mapping is left once
// it returns: the file's pages would count in the daemon's resident memory
// for as long as a connection of the pool kept them mapped.
func TestLargeReadsLeaveNoMapping(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kin.db")
	s := open(t, path)
	ctx := context.Background()
	const n = 5000
	insertRoots(t, s, n)
	if err := s.Close(); err != nil { // the rows go from the log to the file
		t.Fatal(err)
	}
	s = open(t, path)
	ids := make([]kin.AgentID, n)
	for i := range ids {
		ids[i] = kin.AgentID(i + 1)
	}
	for range 3 { // the pool's connections are reused
		size := 0
		err := s.AgentRowsByIDs(ctx, ids, func(records []byte) error {
			size += len(records)
			return nil
		})
		if err != nil || size == 0 {
			t.Fatalf("AgentRowsByIDs: %d bytes, %v", size, err)
		}
		if got, err := s.AgentListByIDs(ctx, ids); err != nil || len(got) != n {
			t.Fatalf("AgentListByIDs: %d, %v", len(got), err)
		}
		if got, err := s.AgentList(ctx, kin.AgentFilter{}); err != nil || len(got) != n {
			t.Fatalf("AgentList: %d, %v", len(got), err)
		}
	}
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(maps), "\n") {
		if strings.HasSuffix(line, " "+path) {
			t.Errorf("the database is still mapped after the reads: %s", line)
		}
	}
}

// TestMigrationFillsBudgetCounters: a database from before migration 8 kept
// only each agent's own spend (the daemon summed subtrees in memory); the
// migration fills the subtree sums and, for agents whose budget limits
// descendants, how many were spawned.
func TestMigrationFillsBudgetCounters(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "kin.db")
	s := open(t, path)
	lead := storetest.Insert(t, s, "lead", 0)
	mid := storetest.Insert(t, s, "mid", lead.ID)
	leaf := storetest.Insert(t, s, "leaf", mid.ID)
	free := storetest.Insert(t, s, "free", 0)
	storetest.Insert(t, s, "free-child", free.ID)
	if err := s.Update(ctx, func(tx store.Tx) error {
		if err := tx.SpendAdd(ctx, leaf.ID, 7, 0.25); err != nil {
			return err
		}
		return tx.SpendAdd(ctx, mid.ID, 3, 0)
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range append(sqlite.UndoHosts,
		`UPDATE agents SET policy = '{"budget":{"max_descendants":5}}' WHERE name = 'lead'`,
		`UPDATE agents SET policy = '{"tools":{"allow":["read"]}}' WHERE name = 'free'`,
		`ALTER TABLE agent_spend DROP COLUMN sub_tokens`,
		`ALTER TABLE agent_spend DROP COLUMN sub_cost`,
		`ALTER TABLE agent_spend DROP COLUMN spawns`,
		`DELETE FROM schema_migrations WHERE version >= 8`,
	) {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()
	s = open(t, path)
	got, err := s.SpendList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []store.SpendRow{
		{ID: lead.ID, SubTokens: 10, SubCost: 0.25, Spawns: 2},
		{ID: mid.ID, Tokens: 3, SubTokens: 10, SubCost: 0.25},
		{ID: leaf.ID, Tokens: 7, Cost: 0.25, SubTokens: 7, SubCost: 0.25},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after migration 8: %+v\nwant %+v (free has a policy but no max_descendants: no count)", got, want)
	}
}

// TestConcurrentOpensMigrateOnce opens one new file from several handles at
// once, as processes started together would: each migration is applied
// once, and every handle opens.
func TestConcurrentOpensMigrateOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kin.db")
	const n = 6
	stores := make([]*sqlite.Store, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stores[i], errs[i] = sqlite.Open(context.Background(), path, sqlite.Options{})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("handle %d: %v", i, err)
			continue
		}
		defer stores[i].Close()
	}
	if t.Failed() {
		t.FailNow()
	}
	storetest.Insert(t, stores[0], "a", 0)
	if got, err := stores[n-1].AgentCount(context.Background()); err != nil || got != 1 {
		t.Fatalf("the last handle counts %d agents, %v", got, err)
	}
}
