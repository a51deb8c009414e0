package postgres_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/internal/store/postgres"
	"github.com/kin-agents/kin/internal/store/storetest"
)

var dbSeq atomic.Int64

// newDatabase is a fresh database (temporary: replaced by pgtest).
func newDatabase(t *testing.T) string {
	dir := os.Getenv("KIN_PGQ")
	if dir == "" {
		t.Skip("KIN_PGQ unset")
	}
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, "postgres://postgres@/postgres?host="+dir)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	name := fmt.Sprintf("kin_%d_%d", os.Getpid(), dbSeq.Add(1))
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(ctx, "postgres://postgres@/postgres?host="+dir)
		if err == nil {
			c.Exec(ctx, "DROP DATABASE "+name+" WITH (FORCE)")
			c.Close(ctx)
		}
	})
	return "postgres://postgres@/" + name + "?host=" + dir
}

func TestPostgresStore(t *testing.T) {
	storetest.Exercise(t, func(t *testing.T) (store.Store, func() store.Store) {
		dsn := newDatabase(t)
		open := func() store.Store {
			s, err := postgres.Open(context.Background(), dsn, postgres.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		}
		return open(), open
	})
}
