package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/proctest"
	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/internal/store/sqlite"
	"github.com/kin-agents/kin/internal/store/storetest"
)

// BenchmarkPermChain is what a registration's permission check reads inside
// its transaction: the parent's chain with its budget counters, here a
// child of a root and a root (the registration benchmarks' parents),
// against the cheapest read there is in a transaction (the parent's row).
// The -only-writer rows are the daemon's kin.db, whose writer answers the
// chains it read before from memory (sqlstore's permmemo.go).
func BenchmarkPermChain(b *testing.B) {
	b.Run("read", func(b *testing.B) { benchPermChain(b, false) })
	b.Run("only-writer", func(b *testing.B) { benchPermChain(b, true) })
}

func benchPermChain(b *testing.B, only bool) {
	ctx := context.Background()
	s, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "kin.db"), sqlite.Options{OnlyWriter: only})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	t := &testing.T{}
	root := storetest.Insert(t, s, "root", 0)
	child := storetest.Insert(t, s, "child", root.ID)
	for _, bench := range []struct {
		name string
		read func(tx store.Tx) error
	}{
		{"floor-AgentGetByID", func(tx store.Tx) error { _, err := tx.AgentGetByID(ctx, child.ID); return err }},
		{"PermChain", func(tx store.Tx) error { _, err := tx.PermChain(ctx, child.ID); return err }},
		{"PermChain-root", func(tx store.Tx) error { _, err := tx.PermChain(ctx, root.ID); return err }},
		{"SettingList", func(tx store.Tx) error { _, err := tx.SettingList(ctx); return err }},
	} {
		b.Run(bench.name, func(b *testing.B) {
			var cpu time.Duration
			err := s.Update(ctx, func(tx store.Tx) error {
				b.ResetTimer()
				cpu0 := proctest.CPU()
				for range b.N {
					if err := bench.read(tx); err != nil {
						return err
					}
				}
				b.StopTimer()
				cpu = proctest.CPU() - cpu0
				return nil
			})
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
			if err != nil {
				b.Fatal(err)
			}
		})
	}
}
