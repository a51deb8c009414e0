package sqlite_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/proctest"
	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/kin"
)

// BenchmarkCascadeRecord is the store's side of a 1,110-agent cascade's
// record, without its events: the agents' rows read whole or lean
// (AgentListLeanByIDs), then their end written one UPDATE per agent or
// one for all (AgentUpdateMany), in one transaction with its commit.
// cpu-ms/op is the process's CPU time per record.
func BenchmarkCascadeRecord(b *testing.B) {
	ctx := context.Background()
	const n = 1110
	for _, c := range []struct {
		name       string
		lean, many bool
	}{{"whole-each", false, false}, {"lean-each", true, false}, {"whole-many", false, true}, {"lean-many", true, true}} {
		b.Run(c.name, func(b *testing.B) {
			s := open(&testing.T{}, filepath.Join(b.TempDir(), "kin.db"))
			defer s.Close()
			ids := insertAgents(b, s, n, func(a *kin.Agent) { a.Command = []string{"/bin/sleep", "3600"} }, true)
			stopping := kin.StateStopping
			cpu0 := proctest.CPU()
			for b.Loop() {
				now := time.Now()
				err := s.Update(ctx, func(tx store.Tx) error {
					read := tx.AgentListByIDs
					if c.lean {
						read = tx.AgentListLeanByIDs
					}
					rows, err := read(ctx, ids)
					if err != nil || len(rows) != n {
						return fmt.Errorf("%d rows, %v", len(rows), err)
					}
					if c.many {
						return tx.AgentUpdateMany(ctx, ids, store.AgentUpdateParams{At: now, State: &stopping})
					}
					for _, id := range ids {
						if err := tx.AgentUpdate(ctx, store.AgentUpdateParams{ID: id, At: now, State: &stopping}); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(proctest.CPU()-cpu0)/float64(time.Millisecond)/float64(b.N), "cpu-ms/op")
		})
	}
}
