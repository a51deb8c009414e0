package sqlstore_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"net/url"
	"path/filepath"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/internal/store/sqlite"
	"github.com/kin-agents/kin/internal/store/sqlstore"
	"github.com/kin-agents/kin/internal/store/storetest"
	"github.com/kin-agents/kin/kin"
)

// faultStore is a store over a new SQLite file whose writer's connection
// fails the RELEASE SAVEPOINT that fault says fails: sqlstore's own over a
// driver wrapped around the real one, as the daemon's only writer.
func faultStore(t *testing.T) (*sqlstore.Store, *releaseFault) {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "kin.db")
	// sqlite.Open creates and migrates the file; the store under test is
	// sqlstore's own over the wrapped driver.
	pre, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := pre.Close(); err != nil {
		t.Fatal(err)
	}
	probe, err := sql.Open("sqlite", "") // only for its driver: opens nothing
	if err != nil {
		t.Fatal(err)
	}
	inner := probe.Driver()
	probe.Close()
	fault := &releaseFault{}
	base := "file:" + (&url.URL{Path: path}).EscapedPath() + "?_pragma=busy_timeout(10000)&_pragma=foreign_keys(1)&_pragma=journal_mode(WAL)"
	wdb := sql.OpenDB(faultConnector{faultDriver{inner: inner, fault: fault}, base + "&_txlock=immediate"})
	wdb.SetMaxOpenConns(1)
	rdb, err := sql.Open("sqlite", base+"&_pragma=query_only(1)")
	if err != nil {
		wdb.Close()
		t.Fatal(err)
	}
	d := &sqlstore.Dialect{
		Name:        "sqlite",
		Begin:       func(ctx context.Context, w *sql.DB, _ bool) (*sql.Tx, error) { return w.BeginTx(ctx, nil) },
		InsertRowID: true,
	}
	s, err := sqlstore.New(ctx, sqlstore.Config{Dialect: d, Writer: wdb, Readers: rdb, OnlyWriter: true})
	if err != nil {
		wdb.Close()
		rdb.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })

	return s, fault
}

// TestPermRowsForgottenWhenNoUpdateCommits: a batch in which no Update
// counts as done is rolled back whole, and the writer forgets the
// permission rows it learnt in it (permmemo.go), even from an Update that
// ran to its end and failed only at its savepoint's RELEASE: the stage it
// wrote, and the chain it then read, are not the database's. Otherwise the
// next registration under the agent would be checked against a stage it
// never had. SQLite's RELEASE is made to fail by a driver wrapped around
// the real one, on a real file.
func TestPermRowsForgottenWhenNoUpdateCommits(t *testing.T) {
	ctx := context.Background()
	s, fault := faultStore(t)

	var root, child kin.AgentID
	err := s.Update(ctx, func(tx store.Tx) error {
		r, err := tx.AgentInsert(ctx, store.AgentInsertParams{Agent: storetest.NewAgent("root", 0, 0)})
		if err != nil {
			return err
		}
		c, err := tx.AgentInsert(ctx, store.AgentInsertParams{Agent: storetest.NewAgent("child", r.ID, 1)})
		if err != nil {
			return err
		}
		root, child = r.ID, c.ID
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// A batch of three: the first holds the writer until the other two
	// are queued behind it, in order. The second fails; the third writes
	// the child's stage, reads its chain (the writer keeps its rows) and
	// returns nil, and its RELEASE fails: no Update of that batch is done.
	hold, held := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		s.Update(ctx, func(store.Tx) error { close(held); <-hold; return nil }) //nolint:errcheck // only holds the writer
	})
	<-held
	errFail := errors.New("fails")
	var failed, released error
	wg.Go(func() { failed = s.Update(ctx, func(store.Tx) error { return errFail }) })
	waitQueued(t, s, 1)
	wg.Go(func() {
		released = s.Update(ctx, func(tx store.Tx) error {
			stage := "elevated"
			if err := tx.AgentUpdate(ctx, store.AgentUpdateParams{ID: child, At: time.Unix(1_900_000_000, 0), Stage: &stage}); err != nil {
				return err
			}
			if _, err := tx.PermChain(ctx, child); err != nil {
				return err
			}
			fault.next.Store(true) // the RELEASE after this Update fails
			return nil
		})
	})
	waitQueued(t, s, 2)
	close(hold)
	wg.Wait()
	if !errors.Is(failed, errFail) || released == nil {
		t.Fatalf("the batch's updates returned %v and %v; want %v and the RELEASE's failure", failed, released, errFail)
	}

	want, err := s.PermChain(ctx, child) // the read pool: the database's rows
	if err != nil {
		t.Fatal(err)
	}
	if len(want) != 2 || want[0].Stage != "" || want[1].ID != root {
		t.Fatalf("the database's chain of %d: %+v; want %d (no stage) then %d", child, want, child, root)
	}
	var got []store.PermRow
	err = s.Update(ctx, func(tx store.Tx) error {
		got, err = tx.PermChain(ctx, child)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("after a batch rolled back whole, the writer answers agent %d's chain with stage %q; the database holds stage %q:\n%+v\nwant\n%+v", child, got[0].Stage, want[0].Stage, got, want)
	}
}

// TestUpdateWhoseReleaseFailsIsUndone: an Update that ran to its end and
// whose savepoint's RELEASE then failed is reported failed, and so its
// writes are undone, while the Updates of its batch before and after it
// commit. Before, its agent was committed though its caller was told the
// registration failed.
func TestUpdateWhoseReleaseFailsIsUndone(t *testing.T) {
	ctx := context.Background()
	s, fault := faultStore(t)
	insert := func(name string, release bool) func(store.Tx) error {
		return func(tx store.Tx) error {
			if _, err := tx.AgentInsert(ctx, store.AgentInsertParams{Agent: storetest.NewAgent(name, 0, 0)}); err != nil {
				return err
			}
			err := store.AppendEvent(ctx, tx, time.Unix(1_900_000_000, 0), kin.EventAgentRegistered, 0, 0, map[string]string{"name": name})
			if err == nil && !release {
				fault.next.Store(true) // the RELEASE after this Update fails
			}
			return err
		}
	}
	hold, held := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	var first, second, third error
	wg.Go(func() {
		first = s.Update(ctx, func(tx store.Tx) error {
			close(held)
			<-hold
			return insert("first", true)(tx)
		})
	})
	<-held
	wg.Go(func() { second = s.Update(ctx, insert("second", false)) })
	waitQueued(t, s, 1)
	wg.Go(func() { third = s.Update(ctx, insert("third", true)) })
	waitQueued(t, s, 2)
	close(hold)
	wg.Wait()
	if first != nil || third != nil || second == nil {
		t.Fatalf("the batch's updates returned %v, %v, %v; want nil, the RELEASE's failure, nil", first, second, third)
	}
	for name, want := range map[string]bool{"first": true, "second": false, "third": true} {
		as, err := s.AgentList(ctx, kin.AgentFilter{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		if got := len(as) == 1; got != want {
			t.Errorf("agent %q stored: %v, want %v (the second Update was reported failed)", name, got, want)
		}
	}
	evs, err := s.EventList(ctx, kin.EventFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 {
		t.Errorf("%d events stored, want the first's and the third's: %+v", len(evs), evs)
	}
	if err := s.Update(ctx, insert("after", true)); err != nil {
		t.Fatalf("an update after the batch: %v", err)
	}
}

// waitQueued waits until n Updates wait for the writer.
func waitQueued(t *testing.T, s *sqlstore.Store, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for s.Queued() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d updates queued after 10s, want %d", s.Queued(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// releaseFault makes the next RELEASE SAVEPOINT fail, once, when next is
// set.
type releaseFault struct{ next atomic.Bool }

func (f *releaseFault) fails(query string) bool {
	return query == sqlstore.ReleaseSQL && f.next.CompareAndSwap(true, false)
}

var errRelease = errors.New("injected: cannot release savepoint")

// faultDriver is a database/sql driver that runs everything through inner
// except the RELEASE that fault says fails.
type faultDriver struct {
	inner driver.Driver
	fault *releaseFault
}

func (d faultDriver) Open(name string) (driver.Conn, error) {
	c, err := d.inner.Open(name)
	if err != nil {
		return nil, err
	}
	return faultConn{c, d.fault}, nil
}

type faultConnector struct {
	d   faultDriver
	dsn string
}

func (c faultConnector) Connect(context.Context) (driver.Conn, error) { return c.d.Open(c.dsn) }
func (c faultConnector) Driver() driver.Driver                        { return c.d }

type faultConn struct {
	driver.Conn
	fault *releaseFault
}

func (c faultConn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

func (c faultConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	var st driver.Stmt
	var err error
	if p, ok := c.Conn.(driver.ConnPrepareContext); ok {
		st, err = p.PrepareContext(ctx, query)
	} else {
		st, err = c.Conn.Prepare(query)
	}
	if err != nil {
		return nil, err
	}
	return faultStmt{st, query, c.fault}, nil
}

func (c faultConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if b, ok := c.Conn.(driver.ConnBeginTx); ok {
		return b.BeginTx(ctx, opts)
	}
	return nil, errors.New("the inner driver's connection has no BeginTx")
}

type faultStmt struct {
	driver.Stmt
	query string
	fault *releaseFault
}

func (s faultStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	if s.fault.fails(s.query) {
		return nil, errRelease
	}
	if e, ok := s.Stmt.(driver.StmtExecContext); ok {
		return e.ExecContext(ctx, args)
	}
	return nil, errors.New("the inner driver's statement has no ExecContext")
}

func (s faultStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	if q, ok := s.Stmt.(driver.StmtQueryContext); ok {
		return q.QueryContext(ctx, args)
	}
	return nil, errors.New("the inner driver's statement has no QueryContext")
}
