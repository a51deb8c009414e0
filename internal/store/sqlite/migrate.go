package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"time"

	"github.com/kin-agents/kin/internal/auditlog"
	"github.com/kin-agents/kin/internal/store/sqlstore"
	"github.com/kin-agents/kin/kin"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// migrationSteps are Go steps that run after a migration's SQL, in its
// transaction: data changes SQL cannot express.
var migrationSteps = map[int]func(context.Context, *sql.Tx) error{
	7: backfillLog,
}

// migrate applies the embedded migrations that the database has not seen
// (sqlstore.Migrate; BEGIN IMMEDIATE, the DSN's _txlock, holds the file's
// write lock in each migration's transaction).
func migrate(ctx context.Context, db *sql.DB) error {
	return sqlstore.Migrate(ctx, db, readDialect, sqlstore.Migrations{FS: migrationFS, Dir: "migrations", Steps: migrationSteps})
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
