package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/proctest"
	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/internal/store/sqlite"
	"github.com/kin-agents/kin/kin"
)

// BenchmarkMeteringCommit is the model gateway's metering of one call
// alone in its batch, as Authority.ModelCall runs it for an agent whose
// chain has no caps: SpendAdd up a chain of three and a model.call event,
// lazily durable (UpdateLazy), one call after another (a batch each, as
// calls ending apart are). cpu-us/op is the process's CPU per call: the
// writer's and the caller's.
func BenchmarkMeteringCommit(b *testing.B) {
	ctx := context.Background()
	s, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "kin.db"), sqlite.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	insert := func(name string, parent kin.AgentID, gen int) *kin.Agent {
		var a *kin.Agent
		if err := s.Update(ctx, func(tx store.Tx) (err error) {
			a, err = tx.AgentInsert(ctx, store.AgentInsertParams{Agent: kin.Agent{Name: name, Parent: parent, Generation: gen,
				Responsible: "Dr. Schmidt", State: kin.StateActive, CreatedAt: time.Now()}})
			return err
		}); err != nil {
			b.Fatal(err)
		}
		return a
	}
	root := insert("root", 0, 0)
	parent := insert("parent", root.ID, 1)
	agent := insert("agent", parent.ID, 2)
	meter := func(tx store.Tx) error {
		if err := tx.SpendAdd(ctx, agent.ID, 15, 0.001); err != nil {
			return err
		}
		return store.AppendEvent(ctx, tx, time.Now(), kin.EventModelCall, agent.ID, parent.ID,
			kin.ModelCallData{Agent: agent.ID, API: "anthropic", Path: "/v1/messages", Upstream: "anthropic",
				Model: "claude-3-5-haiku-latest", Stream: true, Tokens: 30, InputTokens: 10, OutputTokens: 20, LatencyMS: 312.5, Status: 200})
	}
	if err := s.UpdateLazy(ctx, meter); err != nil { // the statements prepared
		b.Fatal(err)
	}
	cpu0 := proctest.CPU()
	for b.Loop() {
		if err := s.UpdateLazy(ctx, meter); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64((proctest.CPU()-cpu0).Microseconds())/float64(b.N), "cpu-us/op")
	spend, err := s.SpendList(ctx)
	if err != nil || len(spend) != 3 || spend[2].Tokens != int64(15*(b.N+1)) || spend[0].SubTokens != spend[2].Tokens {
		b.Fatalf("spend after %d calls: %+v, %v", b.N+1, spend, err)
	}
}
