package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"

	"github.com/kin-agents/kin/internal/store/sqlstore"
)

// OpenReadOnly opens the database file at path only to read its log, for
// `kin log verify --db` on a stopped daemon's file or a copy: it never
// migrates or writes, and needs no daemon.
func OpenReadOnly(ctx context.Context, path string) (*sqlstore.ReadOnly, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	// Escaped as Open does: a '?', '#' or '%' in the path would otherwise
	// end the file name early and open (even create) another file,
	// read-write.
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: path}).EscapedPath()+"?mode=ro&_pragma=busy_timeout(10000)&_pragma=query_only(1)")
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	var version int
	if err := db.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&version); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlite: %s is not a kin database: %w", path, err)
	}
	if version < 7 {
		db.Close()
		return nil, fmt.Errorf("sqlite: %s predates the event log (schema version %d): start kin serve on it once to upgrade it", path, version)
	}
	return sqlstore.NewReadOnly(db, readDialect), nil
}
