package postgres_test

import (
	"context"
	"os"
	"testing"

	"github.com/kin-agents/kin/internal/pgtest"
	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/internal/store/postgres"
	"github.com/kin-agents/kin/internal/store/storetest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

func TestPostgresStore(t *testing.T) {
	storetest.Exercise(t, func(t *testing.T) (store.Store, func() store.Store) {
		dsn := pgtest.NewDatabase(t)
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
