package postgres

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/kin-agents/kin/internal/store/sqlstore"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// migrate applies the embedded migrations the database has not seen, each
// in its own transaction with its version row, while holding the
// migration lock: handles that open a new database together apply each
// once. Files are named NNNN_what.sql and applied in order; an applied
// file is never edited.
func migrate(ctx context.Context, db *sql.DB) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, migrateLockKey); err != nil {
		return fmt.Errorf("migration lock: %w", err)
	}
	defer conn.ExecContext(context.Background(), `SELECT pg_advisory_unlock($1)`, migrateLockKey)
	return sqlstore.Migrate(ctx, conn, dialect, sqlstore.Migrations{FS: migrationFS, Dir: "migrations"})
}

// pgError is err's PostgreSQL error, or nil.
func pgError(err error) *pgconn.PgError {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe
	}
	return nil
}
