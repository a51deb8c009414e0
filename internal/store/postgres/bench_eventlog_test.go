package postgres

import (
	"context"
	"testing"

	"github.com/kin-agents/kin/internal/pgtest"
	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/internal/store/storetest"
)

// BenchmarkEventAppend appends 1,000 events per Update (one transaction,
// durable as the server's synchronous_commit says: on by default), with
// and without the log's tree hashes; package sqlite's is the same on
// SQLite, and one command runs both:
//
//	go test -run '^$' -bench BenchmarkEventAppend ./internal/store/sqlite ./internal/store/postgres
func BenchmarkEventAppend(b *testing.B) {
	storetest.BenchEventAppend(b, func(b *testing.B, unhashed bool) store.Store {
		s, err := Open(context.Background(), pgtest.NewDatabase(b), Options{unhashed: unhashed})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		return s
	})
}
