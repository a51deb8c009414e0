package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
)

// Migrations are a driver's schema changes: files NNNN_what.sql in Dir of
// FS, applied in order, each in its own transaction with its version row;
// an applied file is never edited. Steps are Go steps that run after a
// file's SQL, in its transaction: data changes SQL cannot express.
type Migrations struct {
	FS    fs.FS
	Dir   string
	Steps map[int]func(context.Context, *sql.Tx) error
}

// Migrate applies the migrations the database has not seen, through q (a
// pool or one connection) and d's SQL. Each transaction reads the version
// again before it applies a file: another handle opening the same new
// database may have applied it since (the driver's transaction holds the
// write lock: SQLite's BEGIN IMMEDIATE; PostgreSQL's migration lock, which
// its caller holds).
func Migrate(ctx context.Context, q interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}, d *Dialect, m Migrations) error {
	if _, err := q.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL)`); err != nil {
		return fmt.Errorf("create schema_migrations: %w", err)
	}
	var current int
	if err := q.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&current); err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	names, err := fs.Glob(m.FS, m.Dir+"/*.sql")
	if err != nil {
		return err
	}
	sort.Strings(names)
	latest := 0
	for _, name := range names {
		base := strings.TrimPrefix(name, m.Dir+"/")
		version, err := strconv.Atoi(strings.SplitN(base, "_", 2)[0])
		if err != nil {
			return fmt.Errorf("migration %s: name must start with a number", base)
		}
		latest = version
		if version <= current {
			continue
		}
		body, err := fs.ReadFile(m.FS, name)
		if err != nil {
			return err
		}
		if err := apply(ctx, q, d, version, base, string(body), m.Steps[version]); err != nil {
			return fmt.Errorf("migration %s: %w", base, err)
		}
	}
	if current > latest {
		return fmt.Errorf("the database is at schema version %d but this kin knows only up to %d: use a newer kin", current, latest)
	}
	return nil
}

// apply runs one migration in its transaction, unless it was applied
// meanwhile.
func apply(ctx context.Context, q interface {
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}, d *Dialect, version int, name, body string, step func(context.Context, *sql.Tx) error) error {
	tx, err := q.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() // after a Commit, a no-op
	var applied int
	if err := tx.QueryRowContext(ctx, d.rebind(`SELECT COUNT(*) FROM schema_migrations WHERE version >= ?`), version).Scan(&applied); err != nil {
		return err
	}
	if applied > 0 {
		return nil
	}
	if _, err := tx.ExecContext(ctx, body); err != nil {
		return err
	}
	if step != nil {
		if err := step(ctx, tx); err != nil {
			return err
		}
	}
	if _, err := tx.ExecContext(ctx, d.rebind(`INSERT INTO schema_migrations (version, name) VALUES (?, ?)`), version, name); err != nil {
		return err
	}
	return tx.Commit()
}
