package postgres

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/kin-agents/kin/internal/pgtest"
	"github.com/kin-agents/kin/internal/store/sqlstore"
)

// TestPipelineSavepointsRideWithTheNextStatement: on the writer's wrapped
// connection a held savepoint goes with the next statement, so an Update's
// failed statement is undone to its own savepoint and an earlier Update's
// writes stay. When the held savepoint itself failed (the transaction was
// already aborted), the next ROLLBACK TO is refused: it would roll back to
// the earlier Update's savepoint and undo writes the writer already counted
// as done (the writer then fails the whole batch, as it did when each
// savepoint was a statement of its own).
func TestPipelineSavepointsRideWithTheNextStatement(t *testing.T) {
	ctx := context.Background()
	db := pipelineDB(t, `CREATE TABLE t (v int)`)
	count := func(tx *sql.Tx) int {
		t.Helper()
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM t WHERE v > $1`, 0).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	exec := func(tx *sql.Tx, q string, args ...any) error {
		_, err := tx.ExecContext(ctx, q, args...)
		return err
	}

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Update 1: its savepoint, then a write.
	if err := exec(tx, sqlstore.SavepointSQL); err != nil {
		t.Fatal(err)
	}
	if err := exec(tx, `INSERT INTO t VALUES ($1)`, 1); err != nil {
		t.Fatal(err)
	}
	// Update 2: its savepoint with its first statement, which fails
	// on the server; undone to its own savepoint.
	if err := exec(tx, sqlstore.ReleaseSavepointSQL); err != nil {
		t.Fatal(err)
	}
	if err := exec(tx, `INSERT INTO t VALUES ($1::int / 0)`, 2); err == nil {
		t.Fatal("a division by zero succeeded")
	}
	if err := exec(tx, sqlstore.RollbackToSQL); err != nil {
		t.Fatalf("rollback to the failed Update's own savepoint: %v", err)
	}
	if n := count(tx); n != 1 {
		t.Fatalf("after undoing update 2: %d rows, want update 1's", n)
	}
	// Update 3 writes, then ignores a failed statement of its own (the
	// transaction is now aborted) and reports success. Update 4's held
	// savepoint (RELEASE 3's, SAVEPOINT 4's) fails with its first
	// statement: savepoint u is still update 3's, so a ROLLBACK TO now
	// would quietly undo update 3's write, already counted as done.
	if err := exec(tx, sqlstore.ReleaseSavepointSQL); err != nil {
		t.Fatal(err)
	}
	if err := exec(tx, `INSERT INTO t VALUES ($1)`, 3); err != nil {
		t.Fatal(err)
	}
	_ = exec(tx, `SELECT $1::int / 0`, 3) // ignored: the transaction is aborted
	if err := exec(tx, sqlstore.ReleaseSavepointSQL); err != nil {
		t.Fatal(err)
	}
	if err := exec(tx, `INSERT INTO t VALUES ($1)`, 4); err == nil {
		t.Fatal("a statement in an aborted transaction succeeded")
	}
	if err := exec(tx, sqlstore.RollbackToSQL); err == nil {
		t.Fatalf("ROLLBACK TO after the held savepoint failed succeeded: it rolled back to update 3's savepoint (rows now %d, update 3's write gone)", count(tx))
	}
	tx.Rollback()

	// A new transaction starts sure again.
	tx, err = db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if err := exec(tx, sqlstore.SavepointSQL); err != nil {
		t.Fatal(err)
	}
	if err := exec(tx, `INSERT INTO t VALUES ($1::int / 0)`, 3); err == nil {
		t.Fatal("a division by zero succeeded")
	}
	if err := exec(tx, sqlstore.RollbackToSQL); err != nil {
		t.Fatalf("rollback in a new transaction: %v", err)
	}
	// A held savepoint pair followed by a statement without arguments is
	// sent ahead of it, as one simple query.
	if err := exec(tx, sqlstore.ReleaseSavepointSQL); err != nil {
		t.Fatal(err)
	}
	if err := exec(tx, `INSERT INTO t VALUES (5)`); err != nil {
		t.Fatalf("a statement without arguments after a held savepoint: %v", err)
	}
	if n := count(tx); n != 1 { // the first transaction was rolled back
		t.Fatalf("%d rows, want the one just inserted", n)
	}
}

// TestPipelineHeldWritesRideWithTheNextStatement: a write whose context
// carries a sqlstore.Held is not sent when it is run but with the next
// statement, behind the savepoints held before it, and told its outcome
// there. One that fails aborts what followed it: those are told they did
// not run, the statement that carried it fails, and only the writer's
// ROLLBACK TO that knows (sqlstore.Recover) is sent, back to the savepoint
// made before the failed write. A flush, and a COMMIT, send what is held.
func TestPipelineHeldWritesRideWithTheNextStatement(t *testing.T) {
	ctx := context.Background()
	db := pipelineDB(t, `CREATE TABLE t (v int UNIQUE)`)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	exec := func(ctx context.Context, q string, args ...any) error {
		t.Helper()
		_, err := tx.ExecContext(ctx, q, args...)
		return err
	}
	hold := func(v int) *sqlstore.Held {
		t.Helper()
		h := &sqlstore.Held{}
		if err := exec(sqlstore.Hold(ctx, h), `INSERT INTO t VALUES ($1)`, v); err != nil {
			t.Fatalf("hold insert %d: %v", v, err)
		}
		return h
	}
	count := func() (int, error) {
		var n int
		err := tx.QueryRowContext(ctx, `SELECT count(*) FROM t WHERE v > $1`, 0).Scan(&n)
		return n, err
	}
	if err := exec(ctx, sqlstore.SavepointSQL); err != nil {
		t.Fatal(err)
	}
	h1 := hold(1)
	if done, _ := h1.Outcome(); done {
		t.Fatal("the held insert was reported before any statement carried it")
	}
	if err := exec(ctx, sqlstore.ReleaseSavepointSQL); err != nil {
		t.Fatal(err)
	}
	if n, err := count(); err != nil || n != 1 {
		t.Fatalf("after the read that carried the insert: %d rows, %v", n, err)
	}
	if done, err := h1.Outcome(); !done || err != nil {
		t.Fatalf("held insert 1: done %v, %v; want done", done, err)
	}
	// Update b (savepoint made above, with the read) holds a clashing
	// insert; update c's savepoint and insert are held behind it.
	h2 := hold(1)
	if err := exec(ctx, sqlstore.ReleaseSavepointSQL); err != nil {
		t.Fatal(err)
	}
	h3 := hold(3)
	if _, err := count(); !errors.Is(err, errHeldFailed) {
		t.Fatalf("the read after a failed held insert: %v, want %v", err, errHeldFailed)
	}
	if done, err := h2.Outcome(); !done || err == nil || !strings.Contains(err.Error(), "duplicate key") {
		t.Fatalf("held insert 2: done %v, %v; want its unique violation", done, err)
	}
	if done, err := h3.Outcome(); !done || !errors.Is(err, sqlstore.ErrHeldNotRun) {
		t.Fatalf("held insert 3: done %v, %v; want not run", done, err)
	}
	if err := exec(ctx, sqlstore.RollbackToSQL); err == nil {
		t.Fatal("a ROLLBACK TO that does not know a held write failed was sent")
	}
	if err := exec(sqlstore.Recover(ctx), sqlstore.RollbackToSQL); err != nil {
		t.Fatalf("the writer's ROLLBACK TO after the failed held write: %v", err)
	}
	if n, err := count(); err != nil || n != 1 {
		t.Fatalf("back at update b's savepoint: %d rows, %v; want update a's", n, err)
	}
	// A flush sends what is held; so does a COMMIT.
	if err := exec(ctx, sqlstore.ReleaseSavepointSQL); err != nil {
		t.Fatal(err)
	}
	h4 := hold(4)
	if err := exec(ctx, sqlstore.FlushSQL); err != nil {
		t.Fatal(err)
	}
	if done, err := h4.Outcome(); !done || err != nil {
		t.Fatalf("held insert 4 after a flush: done %v, %v", done, err)
	}
	h5 := hold(5)
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if done, err := h5.Outcome(); !done || err != nil {
		t.Fatalf("held insert 5 at the commit: done %v, %v", done, err)
	}
	var got string
	if err := db.QueryRowContext(ctx, `SELECT string_agg(v::text, ',' ORDER BY v) FROM t`).Scan(&got); err != nil || got != "1,4,5" {
		t.Fatalf("committed rows %q, %v; want 1,4,5", got, err)
	}
}

// TestPipelineCommitGoesWithWhatIsHeld: the BEGIN is held for the first
// statement, and the writer's COMMIT (sqlstore.CommitSQL) goes with what is
// held, statements sent ahead (sqlstore.Ahead) and held writes, in one
// round trip. Should any of them fail, the COMMIT is not run and says so:
// a statement sent ahead leaves the transaction to roll back, a held
// write's failure is undone to its savepoint (sqlstore.Recover) and the
// COMMIT sent again. A COMMIT of a transaction that had failed is an
// error, not a quiet rollback.
func TestPipelineCommitGoesWithWhatIsHeld(t *testing.T) {
	ctx := context.Background()
	db, trips := pipelineDBCounted(t, `CREATE TABLE t (v int UNIQUE)`)
	ahead := sqlstore.Ahead(ctx)
	begin := func() *sql.Tx {
		t.Helper()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		return tx
	}
	exec := func(tx *sql.Tx, ctx context.Context, q string, args ...any) error {
		t.Helper()
		_, err := tx.ExecContext(ctx, q, args...)
		return err
	}
	rows := func() string {
		t.Helper()
		var got sql.NullString
		if err := db.QueryRowContext(ctx, `SELECT string_agg(v::text, ',' ORDER BY v) FROM t`).Scan(&got); err != nil {
			t.Fatal(err)
		}
		return got.String
	}
	counted := func(what string, want int64, fn func()) {
		t.Helper()
		before := trips.Load()
		fn()
		if got := trips.Load() - before; got != want {
			t.Errorf("%s: %d round trips, want %d", what, got, want)
		}
	}

	// A transaction that ran nothing sends nothing, not even its BEGIN.
	counted("begin and roll back", 0, func() {
		if err := begin().Rollback(); err != nil {
			t.Fatal(err)
		}
	})
	// The BEGIN, a statement ahead, a held write and the COMMIT: one trip.
	counted("a transaction of held statements", 1, func() {
		tx := begin()
		if err := exec(tx, ahead, `INSERT INTO t VALUES ($1)`, 1); err != nil {
			t.Fatal(err)
		}
		h := &sqlstore.Held{}
		if err := exec(tx, sqlstore.Hold(ctx, h), `INSERT INTO t VALUES ($1)`, 2); err != nil {
			t.Fatal(err)
		}
		if err := exec(tx, ctx, sqlstore.CommitSQL); err != nil {
			t.Fatal(err)
		}
		if done, err := h.Outcome(); !done || err != nil {
			t.Fatalf("the held write sent with the COMMIT: done %v, %v", done, err)
		}
		if err := exec(tx, ctx, `INSERT INTO t VALUES ($1)`, 9); !errors.Is(err, errCommitted) {
			t.Fatalf("a statement after the COMMIT: %v, want %v", err, errCommitted)
		}
		if err := tx.Commit(); err != nil {
			t.Fatalf("ending the committed transaction: %v", err)
		}
	})
	if got := rows(); got != "1,2" {
		t.Fatalf("committed rows %q, want 1,2", got)
	}

	// A statement sent ahead fails: the COMMIT is not run, the earlier
	// write of the transaction is not committed.
	tx := begin()
	if err := exec(tx, ctx, `INSERT INTO t VALUES ($1)`, 3); err != nil {
		t.Fatal(err)
	}
	if err := exec(tx, ahead, `INSERT INTO t VALUES ($1::int / 0)`, 4); err != nil {
		t.Fatalf("a statement sent ahead failed when it was held: %v", err)
	}
	if err := exec(tx, ctx, sqlstore.CommitSQL); err == nil || !strings.Contains(err.Error(), "division by zero") {
		t.Fatalf("the COMMIT after a failed statement sent ahead: %v, want its division by zero", err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if got := rows(); got != "1,2" {
		t.Fatalf("after the failed COMMIT: rows %q, want 1,2 (3 was not committed)", got)
	}

	// A held write fails with the COMMIT: told so; what followed it (a
	// statement ahead) did not run; back to its savepoint, the COMMIT
	// again commits what came before.
	tx = begin()
	if err := exec(tx, ctx, sqlstore.SavepointSQL); err != nil {
		t.Fatal(err)
	}
	if err := exec(tx, ctx, `INSERT INTO t VALUES ($1)`, 5); err != nil {
		t.Fatal(err)
	}
	if err := exec(tx, ctx, sqlstore.ReleaseSavepointSQL); err != nil {
		t.Fatal(err)
	}
	h := &sqlstore.Held{}
	if err := exec(tx, sqlstore.Hold(ctx, h), `INSERT INTO t VALUES ($1)`, 1); err != nil {
		t.Fatal(err)
	}
	if err := exec(tx, ahead, `INSERT INTO t VALUES ($1)`, 6); err != nil {
		t.Fatal(err)
	}
	if err := exec(tx, ctx, sqlstore.CommitSQL); !errors.Is(err, errHeldFailed) {
		t.Fatalf("the COMMIT after a held write that clashed: %v, want %v", err, errHeldFailed)
	}
	if done, err := h.Outcome(); !done || err == nil || !strings.Contains(err.Error(), "duplicate key") {
		t.Fatalf("the held write: done %v, %v; want its unique violation", done, err)
	}
	if err := exec(tx, sqlstore.Recover(ctx), sqlstore.RollbackToSQL); err != nil {
		t.Fatalf("back to the failed write's savepoint: %v", err)
	}
	if err := exec(tx, ctx, sqlstore.CommitSQL); err != nil {
		t.Fatalf("the COMMIT after recovering: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if got := rows(); got != "1,2,5" {
		t.Fatalf("rows %q, want 1,2,5 (the clash undone, 6 never run)", got)
	}

	// A COMMIT of a failed transaction (its failure ignored) is an error.
	tx = begin()
	if err := exec(tx, ctx, `INSERT INTO t VALUES ($1)`, 7); err != nil {
		t.Fatal(err)
	}
	_ = exec(tx, ctx, `SELECT $1::int / 0`, 1)
	if err := exec(tx, ctx, sqlstore.CommitSQL); err == nil || !strings.Contains(err.Error(), "ROLLBACK") {
		t.Fatalf("the COMMIT of a failed transaction: %v, want an error naming its ROLLBACK", err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	// Commit without the writer's COMMIT sends what is held with it.
	counted("Commit with a held write", 1, func() {
		tx := begin()
		h := &sqlstore.Held{}
		if err := exec(tx, sqlstore.Hold(ctx, h), `INSERT INTO t VALUES ($1)`, 8); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if done, err := h.Outcome(); !done || err != nil {
			t.Fatalf("the held write at the Commit: done %v, %v", done, err)
		}
	})
	// And rolls back, with an error, should one of them fail.
	tx = begin()
	if err := exec(tx, ahead, `INSERT INTO t VALUES ($1)`, 1); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err == nil {
		t.Fatal("a Commit after a clashing insert succeeded")
	}
	if got := rows(); got != "1,2,5,8" {
		t.Fatalf("rows %q, want 1,2,5,8", got)
	}
}

// pipelineDB is a database of one pipelined connection, as the writer's,
// on a fresh database with schema.
func pipelineDB(t *testing.T, schema string) *sql.DB {
	t.Helper()
	db, _ := pipelineDBCounted(t, schema)
	return db
}

// pipelineDBCounted is pipelineDB with its count of round trips.
func pipelineDBCounted(t *testing.T, schema string) (*sql.DB, *atomic.Int64) {
	t.Helper()
	cfg, err := pgx.ParseConfig(pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	trips := new(atomic.Int64)
	db := sql.OpenDB(pipelineConnector{Connector: stdlib.GetConnector(*cfg), trips: trips})
	t.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(1)
	if _, err := db.ExecContext(context.Background(), schema); err != nil {
		t.Fatal(err)
	}
	return db, trips
}
