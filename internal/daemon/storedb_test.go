package daemon_test

import (
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx": a test reaches a PostgreSQL store directly

	"github.com/kin-agents/kin/internal/kintest"
)

// onSQLite reports whether d keeps its store in SQLite's <home>/kin.db (the
// default, or "sqlite"), rather than the PostgreSQL database
// KIN_TEST_STORE=postgres gives it.
func onSQLite(d *kintest.Daemon) bool { return d.Config.Store == "" || d.Config.Store == "sqlite" }

// storeDB opens d's store's database directly, for a test that changes it
// behind the daemon's back, and returns the n-th placeholder's spelling
// (SQLite's ?, PostgreSQL's $n).
func storeDB(t testing.TB, d *kintest.Daemon) (*sql.DB, func(n int) string) {
	t.Helper()
	var db *sql.DB
	var err error
	arg := func(int) string { return "?" }
	if onSQLite(d) {
		db, err = sql.Open("sqlite", filepath.Join(d.Home, "kin.db"))
	} else {
		db, err = sql.Open("pgx", d.Config.Store)
		arg = func(n int) string { return fmt.Sprintf("$%d", n) }
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db, arg
}

// storeBytes is what d's store takes on disk: kin.db and its WAL, or the
// PostgreSQL database's size (its tables, indexes and TOAST; the server's
// WAL is the server's).
func storeBytes(t testing.TB, d *kintest.Daemon) int64 {
	t.Helper()
	if !onSQLite(d) {
		db, _ := storeDB(t, d)
		var n int64
		if err := db.QueryRow(`SELECT pg_database_size(current_database())`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	var n int64
	for _, f := range []string{"kin.db", "kin.db-wal"} {
		if fi, err := os.Stat(filepath.Join(d.Home, f)); err == nil {
			n += fi.Size()
		}
	}
	return n
}
