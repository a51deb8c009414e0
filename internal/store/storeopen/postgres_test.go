package storeopen

import (
	"context"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/kin-agents/kin/internal/auditlog"
	"github.com/kin-agents/kin/internal/pgtest"
	"github.com/kin-agents/kin/internal/store/sqlstore"
	"github.com/kin-agents/kin/internal/store/storetest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// TestOpenPostgres: a postgres:// DSN opens the PostgreSQL driver, whose
// Driver() names the database without secrets; OpenReadOnly reads and
// verifies the same log (`kin log verify --db postgres://...`) and takes
// no write; a database that is not kin's is refused as such.
func TestOpenPostgres(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.NewDatabase(t)
	for _, form := range []string{dsn, "postgresql" + strings.TrimPrefix(dsn, "postgres")} {
		s, err := Open(ctx, form, Options{})
		if err != nil {
			t.Fatalf("Open(%q): %v", form, err)
		}
		if got := s.Driver(); !strings.HasPrefix(got, "postgres://") || !strings.Contains(got, "/"+dbName(t, dsn)) {
			t.Errorf("Open(%q).Driver() = %q", form, got)
		}
		if _, err := storetest.AppendEvents(t, s, 0, 3, nil); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	ro, err := OpenReadOnly(ctx, dsn, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	_, v := storetest.LogKey(t)
	rep, err := auditlog.Verify(ctx, ro, auditlog.VerifyOptions{Verifier: v})
	if err != nil || !rep.OK || rep.Events != 6 {
		t.Fatalf("verify read-only: %+v, %v", rep, err)
	}
	if _, err := ro.(*sqlstore.ReadOnly).DB().ExecContext(ctx, `DELETE FROM events`); err == nil || !strings.Contains(err.Error(), "read-only") {
		t.Errorf("a write through the read-only handle: %v, want it refused as read-only", err)
	}
	// The server's own database is not kin's.
	other := strings.Replace(dsn, "/"+dbName(t, dsn)+"?", "/postgres?", 1)
	if r, err := OpenReadOnly(ctx, other, Options{}); err == nil || !strings.Contains(err.Error(), "not a kin database") {
		if r != nil {
			r.Close()
		}
		t.Errorf("OpenReadOnly of the postgres database: %v, want it named not a kin database", err)
	}
}

// dbName is the database a pgtest DSN names.
func dbName(t *testing.T, dsn string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimPrefix(u.Path, "/")
}
