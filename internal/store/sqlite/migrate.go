package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/kin-agents/kin/internal/auditlog"
	"github.com/kin-agents/kin/kin"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// migrationSteps are Go steps that run after a migration's SQL, in its
// transaction: data changes SQL cannot express.
var migrationSteps = map[int]func(context.Context, *sql.Tx) error{
	7: backfillLog,
}

// migrate applies the embedded migrations that the database has not seen,
// each in its own transaction with its version row. Files are named
// NNNN_what.sql and applied in order; an applied file is never edited.
func migrate(ctx context.Context, db *sql.DB) error {
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL)`); err != nil {
		return fmt.Errorf("create schema_migrations: %w", err)
	}
	var current int
	if err := db.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&current); err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	names, err := fs.Glob(migrationFS, "migrations/*.sql")
	if err != nil {
		return err
	}
	sort.Strings(names)
	latest := 0
	for _, name := range names {
		base := strings.TrimPrefix(name, "migrations/")
		version, err := strconv.Atoi(strings.SplitN(base, "_", 2)[0])
		if err != nil {
			return fmt.Errorf("migration %s: name must start with a number", base)
		}
		latest = version
		if version <= current {
			continue
		}
		body, err := migrationFS.ReadFile(name)
		if err != nil {
			return err
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		// Another process opening the same file may have applied it since
		// the read above: the transaction (BEGIN IMMEDIATE) holds the
		// write lock, so this read decides.
		var applied int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM schema_migrations WHERE version >= ?`, version).Scan(&applied); err != nil {
			tx.Rollback()
			return fmt.Errorf("migration %s: %w", base, err)
		}
		if applied > 0 {
			tx.Rollback()
			continue
		}
		if _, err := tx.ExecContext(ctx, string(body)); err != nil {
			tx.Rollback()
			return fmt.Errorf("migration %s: %w", base, err)
		}
		if step := migrationSteps[version]; step != nil {
			if err := step(ctx, tx); err != nil {
				tx.Rollback()
				return fmt.Errorf("migration %s: %w", base, err)
			}
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, name) VALUES (?, ?)`, version, base); err != nil {
			tx.Rollback()
			return fmt.Errorf("migration %s: %w", base, err)
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("migration %s: %w", base, err)
		}
	}
	if current > latest {
		return fmt.Errorf("the database is at schema version %d but this kin knows only up to %d: use a newer kin", current, latest)
	}
	return nil
}

// backfillLog is migration 7's Go step: it hashes the events stored before
// the log existed into the tree, in order.
func backfillLog(ctx context.Context, tx *sql.Tx) error {
	upd, err := tx.PrepareContext(ctx, `UPDATE events SET hashes = ? WHERE seq = ?`)
	if err != nil {
		return err
	}
	defer upd.Close()
	var f auditlog.Frontier
	for {
		rows, err := tx.QueryContext(ctx, `SELECT seq, time, type, agent_id, parent_id, data FROM events WHERE seq > ? ORDER BY seq LIMIT 10000`, f.Size())
		if err != nil {
			return err
		}
		var batch []kin.Event
		for rows.Next() {
			var e kin.Event
			var at int64
			var data string
			if err := rows.Scan(&e.Seq, &at, &e.Type, &e.Agent, &e.Parent, &data); err != nil {
				rows.Close()
				return err
			}
			e.Time, e.Data = time.Unix(0, at).UTC(), []byte(data)
			batch = append(batch, e)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if len(batch) == 0 {
			return nil
		}
		for _, e := range batch {
			if e.Seq != f.Size()+1 {
				return fmt.Errorf("event log: events must be numbered 1, 2, 3, ... but seq %d follows %d", e.Seq, f.Size())
			}
			if _, err := upd.ExecContext(ctx, auditlog.StoredForm(nil, f.Append(auditlog.LeafHash(e))), e.Seq); err != nil {
				return err
			}
		}
	}
}
