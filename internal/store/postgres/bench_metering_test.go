package postgres_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/pgtest"
	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/internal/store/postgres"
	"github.com/kin-agents/kin/internal/store/storetest"
	"github.com/kin-agents/kin/kin"
)

// BenchmarkMeteringCommit is the model gateway's metering Update alone in
// its batch (SpendAdd up the chain, a model.call event, the chain's sums
// read back: what Authority.ModelCall runs), through UpdateLazy and
// through UpdateLazyDeferrable (as the authority runs it: its writes held
// for its read), the two alternating call by call so that both see the
// same load. Reported: each one's p50 and p90 latency and round trips to
// the server per Update.
func BenchmarkMeteringCommit(b *testing.B) {
	ctx := context.Background()
	s, err := postgres.Open(ctx, pgtest.NewDatabase(b), postgres.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	insert := func(name string, parent kin.AgentID, gen int) *kin.Agent {
		var a *kin.Agent
		if err := s.Update(ctx, func(tx store.Tx) (err error) {
			a, err = tx.AgentInsert(ctx, store.AgentInsertParams{Agent: storetest.NewAgent(name, parent, gen)})
			return err
		}); err != nil {
			b.Fatal(err)
		}
		return a
	}
	parent := insert("parent", 0, 0)
	agent := insert("agent", parent.ID, 1)
	meter := func(tx store.Tx) error {
		if err := tx.SpendAdd(ctx, agent.ID, 15, 0.001); err != nil {
			return err
		}
		if err := store.AppendEvent(ctx, tx, time.Now(), kin.EventModelCall, agent.ID, parent.ID,
			kin.ModelCallData{Agent: agent.ID, Model: "gpt-4o-mini", Tokens: 15, InputTokens: 10, OutputTokens: 5}); err != nil {
			return err
		}
		_, err := tx.PermChain(ctx, agent.ID)
		return err
	}
	kinds := []struct {
		name   string
		update func(context.Context, func(store.Tx) error) error
		took   []time.Duration
		trips  int64
	}{
		{name: "lazy", update: s.UpdateLazy},
		{name: "lazy-deferrable", update: s.UpdateLazyDeferrable},
	}
	for i := range kinds { // the first runs prepare pgx's statements
		if err := kinds[i].update(ctx, meter); err != nil {
			b.Fatal(err)
		}
	}
	const calls = 200
	for b.Loop() {
		for range calls {
			for i := range kinds {
				k := &kinds[i]
				trips := s.WriterRoundTrips()
				t0 := time.Now()
				if err := k.update(ctx, meter); err != nil {
					b.Fatal(err)
				}
				k.took = append(k.took, time.Since(t0))
				k.trips += s.WriterRoundTrips() - trips
			}
		}
	}
	b.ReportMetric(0, "ns/op") // an iteration is 200 calls of each: the figures say it
	for i := range kinds {
		k := &kinds[i]
		slices.Sort(k.took)
		b.ReportMetric(float64(k.took[len(k.took)/2].Nanoseconds())/1e3, k.name+"-p50-µs")
		b.ReportMetric(float64(k.took[len(k.took)*9/10].Nanoseconds())/1e3, k.name+"-p90-µs")
		b.ReportMetric(float64(k.trips)/float64(len(k.took)), k.name+"-round-trips/op")
	}
}
