package fleettest_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/fleettest"
	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/kin"
)

// BenchmarkFleetTree is issue 24's fleet-wide `kin tree` of 10,000 agents:
// a root with 10 children of 1,000 registered agents each (10,011 in all),
// registered through the three hosts in turn (each child's subtree through
// its own host); then the whole tree read through each host's API (each
// host's lineage follows the others' registrations from the store).
func BenchmarkFleetTree(b *testing.B) {
	f := fleettest.Start(b)
	hosts := []*fleettest.Host{f.Host(b, "a"), f.Host(b, "b"), f.Host(b, "c")}
	ctx := context.Background()
	if _, err := hosts[0].Client.SetGovernor(ctx, "max_children", "0"); err != nil {
		b.Fatal(err)
	}
	reg := func(h *fleettest.Host, name string, parent kin.AgentID) kin.AgentID {
		a, err := h.Client.Register(ctx, kin.RegisterRequest{Name: name, Parent: parent, Responsible: "bench"})
		if err != nil {
			b.Fatalf("register %s: %v", name, err)
		}
		return a.ID
	}
	root := reg(hosts[0], "root", 0)
	var wg sync.WaitGroup
	for i := range 10 {
		h := hosts[i%3]
		wg.Go(func() {
			kid := reg(h, fmt.Sprintf("k%d", i), root)
			for j := range 1000 {
				reg(h, fmt.Sprintf("l%d-%d", i, j), kid)
			}
		})
	}
	wg.Wait()
	const want = 10011
	count := func(n *kin.TreeNode) int {
		c := 0
		var walk func(n *kin.TreeNode)
		walk = func(n *kin.TreeNode) {
			c++
			for _, k := range n.Children {
				walk(k)
			}
		}
		walk(n)
		return c
	}
	for _, h := range hosts { // every host has followed the others
		kintest.WaitFor(b, time.Minute, "host "+h.Name+" to see the whole tree", func() bool {
			t, err := h.Client.Tree(ctx, root)
			return err == nil && len(t) == 1 && count(t[0]) == want
		})
	}
	spent := map[string]time.Duration{}
	for b.Loop() {
		for _, h := range hosts {
			t0 := time.Now()
			t, err := h.Client.Tree(ctx, root)
			spent[h.Name] += time.Since(t0)
			if err != nil || count(t[0]) != want {
				b.Fatalf("tree on %s: %v", h.Name, err)
			}
		}
	}
	b.ReportMetric(0, "ns/op")
	for _, h := range hosts {
		b.ReportMetric(float64(spent[h.Name].Microseconds())/1000/float64(b.N), "ms-on-"+h.Name)
	}
}
