package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/proctest"
	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/internal/store/storetest"
)

// BenchmarkPermChain is what a registration's permission check reads inside
// its transaction: the parent's chain with its budget counters, here a
// child of a root (the registration benchmarks' shape), against the
// cheapest read there is in a transaction (the parent's row).
func BenchmarkPermChain(b *testing.B) {
	ctx := context.Background()
	s := open(&testing.T{}, filepath.Join(b.TempDir(), "kin.db"))
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
