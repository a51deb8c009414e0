package fleettest_test

import (
	"context"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/fleettest"
	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/kin"
)

// BenchmarkLogsAcrossHosts reads an agent's 8 MiB log on host b through
// b's own API (same host) and through a's (a streams it from b's API, peer
// signed), in the same run: the cost of the hop.
func BenchmarkLogsAcrossHosts(b *testing.B) {
	f := fleettest.Start(b)
	ha, hb := f.Host(b, "a"), f.Host(b, "b")
	ctx := context.Background()
	const size = 8 << 20
	ag, err := hb.Client.Spawn(ctx, kin.SpawnRequest{
		RegisterRequest: kin.RegisterRequest{Name: "writer", Responsible: "bench"},
		Command:         []string{"head", "-c", "8388608", "/dev/zero"},
	})
	if err != nil {
		b.Fatal(err)
	}
	kintest.WaitFor(b, time.Minute, "the writer's end", func() bool {
		got, err := hb.Client.Agent(ctx, ag.ID)
		return err == nil && !got.EndedAt.IsZero()
	})
	read := func(b *testing.B, h *fleettest.Host) {
		b.SetBytes(size)
		for b.Loop() {
			n := 0
			if err := h.Client.Logs(ctx, kin.LogsRequest{ID: ag.ID}, func(p []byte) error { n += len(p); return nil }); err != nil {
				b.Fatal(err)
			}
			if n != size {
				b.Fatalf("read %d bytes through %s, want %d", n, h.Name, size)
			}
		}
	}
	b.Run("same-host", func(b *testing.B) { read(b, hb) })
	b.Run("across-hosts", func(b *testing.B) { read(b, ha) })
}
