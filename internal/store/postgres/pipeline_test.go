package postgres

import (
	"context"
	"database/sql"
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
	cfg, err := pgx.ParseConfig(pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(pipelineConnector{stdlib.GetConnector(*cfg)})
	t.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(1)
	if _, err := db.ExecContext(ctx, `CREATE TABLE t (v int)`); err != nil {
		t.Fatal(err)
	}
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
