package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/kin"
)

// StatusEvent is the i-th of the benchmarks' events: an agent.status
// event as the daemon writes it, about 180 bytes of JSON.
func StatusEvent(i int) kin.Event {
	agent := kin.AgentID(1000 + i%5000)
	data := fmt.Appendf(nil, `{"agent":%d,"from":"active","to":"suspended","action":"suspend","by":"operator:alice@workstation-%d","reason":"manual hold while the budget of run %d is reviewed","cascade_from":%d}`,
		agent, i%7, i, agent-1)
	return kin.Event{
		Time:   time.Date(2026, 11, 21, 15, 2, 39, 0, time.UTC).Add(time.Duration(i) * 1237 * time.Microsecond),
		Type:   kin.EventAgentStatus,
		Agent:  agent,
		Parent: agent - 1,
		Data:   data,
	}
}

// BenchEventAppend appends 1,000 events per Update (one durable
// transaction), with the log's tree hashes (hashed) and without them
// (unhashed): what hashing adds to an append, on the store open gives.
// open returns a fresh store that ends with b, appending without hashes
// when unhashed (a driver's benchmark-only option).
func BenchEventAppend(b *testing.B, open func(b *testing.B, unhashed bool) store.Store) {
	const perTx = 1000
	events := make([]kin.Event, perTx)
	for i := range events {
		events[i] = StatusEvent(i)
	}
	for _, bc := range []struct {
		name     string
		unhashed bool
	}{{"hashed", false}, {"unhashed", true}} {
		b.Run(bc.name, func(b *testing.B) {
			ctx := context.Background()
			s := open(b, bc.unhashed)
			for b.Loop() {
				if err := AppendInOneUpdate(ctx, s, events); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*perTx)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// AppendInOneUpdate appends events, in order, in one Update of s.
func AppendInOneUpdate(ctx context.Context, s store.Store, events []kin.Event) error {
	return s.Update(ctx, func(tx store.Tx) error {
		for _, e := range events {
			if _, err := tx.EventAppend(ctx, e); err != nil {
				return err
			}
		}
		return nil
	})
}
