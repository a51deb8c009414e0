package fleettest_test

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/fleettest"
	"github.com/kin-agents/kin/kin"
)

// BenchmarkFleetCascade is issue 24's cross-host cascade: a root with
// 10 × 10 × 10 owned descendants (1,110, grace 0), its children spread over
// three hosts round-robin (each child's subtree on its own host, so every
// host holds a third of the tree), SIGKILL of the root's process, until
// every descendant is recorded ended; against the same tree on one host
// (every agent on host a), in the same fleet and the same iteration.
// x-one-host = fleet ÷ one host (target ≤ 2).
func BenchmarkFleetCascade(b *testing.B) {
	f := fleettest.Start(b)
	hosts := []*fleettest.Host{f.Host(b, "a"), f.Host(b, "b"), f.Host(b, "c")}
	ctx := context.Background()
	for _, h := range hosts { // no live-children limit for the bench
		if _, err := h.Client.SetGovernor(ctx, "max_children", "0"); err != nil {
			b.Fatal(err)
		}
	}
	var spread, single time.Duration
	for iter := 0; b.Loop(); iter++ {
		spread += cascade(b, hosts, fmt.Sprintf("s%d", iter))
		single += cascade(b, hosts[:1], fmt.Sprintf("o%d", iter))
	}
	n := float64(b.N)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(float64(spread.Milliseconds())/n, "fleet-ms")
	b.ReportMetric(float64(single.Milliseconds())/n, "one-host-ms")
	b.ReportMetric(float64(spread)/float64(single), "x-one-host")
}

// cascade builds the tree (children round-robin over hosts), kills its
// root and returns how long until every descendant was recorded ended.
func cascade(b *testing.B, hosts []*fleettest.Host, tag string) time.Duration {
	ctx := context.Background()
	grace := kin.Duration(0)
	spawn := func(h *fleettest.Host, name string, parent kin.AgentID) *kin.Agent {
		a, err := h.Client.Spawn(ctx, kin.SpawnRequest{RegisterRequest: kin.RegisterRequest{Name: name, Parent: parent, Responsible: "bench"},
			Command: []string{"sleep", "1000"}, Grace: &grace, Host: h.Name})
		if err != nil {
			b.Fatalf("spawn %s: %v", name, err)
		}
		return a
	}
	root := spawn(hosts[0], "root-"+tag, 0)
	var mu sync.Mutex
	var ids []kin.AgentID
	var wg sync.WaitGroup
	for i := range 10 {
		h := hosts[i%len(hosts)]
		wg.Go(func() {
			kid := spawn(h, fmt.Sprintf("k%s-%d", tag, i), root.ID)
			mine := []kin.AgentID{kid.ID}
			for j := range 10 {
				g := spawn(h, fmt.Sprintf("g%s-%d-%d", tag, i, j), kid.ID)
				mine = append(mine, g.ID)
				for k := range 10 {
					mine = append(mine, spawn(h, fmt.Sprintf("l%s-%d-%d-%d", tag, i, j, k), g.ID).ID)
				}
			}
			mu.Lock()
			ids = append(ids, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	start := time.Now()
	if err := syscall.Kill(root.PID, syscall.SIGKILL); err != nil {
		b.Fatal(err)
	}
	c := hosts[0].Client
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ended := 0
		got, err := c.Agents(ctx, kin.AgentFilter{Status: kin.StatusTerminated})
		if err == nil {
			set := map[kin.AgentID]bool{}
			for _, a := range got {
				set[a.ID] = true
			}
			for _, id := range ids {
				if set[id] {
					ended++
				}
			}
		}
		if ended == len(ids) {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d descendants recorded ended after 2 minutes", ended, len(ids))
		}
		time.Sleep(5 * time.Millisecond)
	}
}
