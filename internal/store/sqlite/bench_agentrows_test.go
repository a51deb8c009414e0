package sqlite_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/proctest"
	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/internal/store/storetest"
	"github.com/kin-agents/kin/kin"
)

// BenchmarkAgentListByIDs reads 10,000 whole agent rows by id, what the
// daemon's Tree reads for a 10,000-agent subtree. It reports the CPU time
// of the process per read (cpu-ms/op) beside the wall time: on a shared
// machine the CPU a read costs moves much less than its wall time.
func BenchmarkAgentListByIDs(b *testing.B) {
	ctx := context.Background()
	s := open(&testing.T{}, filepath.Join(b.TempDir(), "kin.db"))
	defer s.Close()
	const n = 10_000
	ids := insertAgents(b, s, n, func(a *kin.Agent) {
		a.ConstitutionHash = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	})
	cpu0 := proctest.CPU()
	b.ResetTimer()
	for range b.N {
		got, err := s.AgentListByIDs(ctx, ids)
		if err != nil || len(got) != n {
			b.Fatalf("%d agents, %v", len(got), err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(proctest.CPU()-cpu0)/float64(time.Millisecond)/float64(b.N), "cpu-ms/op")
}

// insertAgents inserts n agents in one Update, agent-i under agent i/10's
// id when tree (0: a root), each set up by set first; their ids in order.
func insertAgents(b *testing.B, s store.Store, n int, set func(*kin.Agent), tree ...bool) []kin.AgentID {
	b.Helper()
	ctx := context.Background()
	ids := make([]kin.AgentID, 0, n)
	err := s.Update(ctx, func(tx store.Tx) error {
		for i := range n {
			parent := kin.AgentID(0)
			if len(tree) > 0 && tree[0] {
				parent = kin.AgentID(i / 10)
			}
			a := storetest.NewAgent(fmt.Sprintf("agent-%d", i), parent, 0)
			set(&a)
			got, err := tx.AgentInsert(ctx, store.AgentInsertParams{Agent: a})
			if err != nil {
				return err
			}
			ids = append(ids, got.ID)
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return ids
}
