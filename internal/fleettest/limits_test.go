package fleettest_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/fleettest"
	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/kin"
)

// TestLimitsHoldAcrossHosts: the governor's limits are checked in the
// store's transaction, so they hold for the fleet, not per host. Each
// round, 64 concurrent spawns under one parent, spread over three hosts:
// under max_children (a governor setting changed on one host) exactly that
// many are admitted; under a max_descendants budget exactly the budget;
// 20 rounds.
func TestLimitsHoldAcrossHosts(t *testing.T) {
	f := fleettest.Start(t)
	hosts := []*fleettest.Host{f.Host(t, "a"), f.Host(t, "b"), f.Host(t, "c")}
	ctx := context.Background()
	const maxChildren, budget, spawns, rounds = 5, 3, 64, 20
	if _, err := hosts[0].Client.SetGovernor(ctx, "max_children", fmt.Sprint(maxChildren)); err != nil {
		t.Fatal(err)
	}
	for r := range rounds {
		want := maxChildren
		req := kin.RegisterRequest{Name: fmt.Sprintf("parent-%d", r), Responsible: "Dr. Schmidt"}
		if r%2 == 1 {
			n := int64(budget)
			req.Policy = &kin.Policy{Budget: &kin.Budget{MaxDescendants: &n}}
			want = budget
		}
		parent, err := hosts[r%3].Client.Register(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		var admitted, refused atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		for g := range spawns {
			wg.Go(func() {
				<-start
				_, err := hosts[g%3].Client.Spawn(ctx, kin.SpawnRequest{
					RegisterRequest: kin.RegisterRequest{Name: fmt.Sprintf("c%d-%d", r, g), Parent: parent.ID},
					Command:         []string{"sleep", "1000"},
				})
				switch code := kin.ErrorCodeOf(err); {
				case err == nil:
					admitted.Add(1)
				case code == kin.ECodeMaxChildren || code == kin.ECodeBudget || code == kin.ECodeCircuitOpen:
					refused.Add(1)
				default:
					t.Errorf("round %d, spawn %d on %s: %v", r, g, hosts[g%3].Name, err)
				}
			})
		}
		close(start)
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
		kids, err := hosts[(r+1)%3].Client.Children(ctx, parent.ID)
		if err != nil {
			t.Fatal(err)
		}
		if admitted.Load() != int64(want) || len(kids) != want {
			t.Fatalf("round %d: %d admitted, %d refused, %d children listed; want exactly %d", r, admitted.Load(), refused.Load(), len(kids), want)
		}
		if _, err := hosts[r%3].Client.Stop(ctx, kin.StopRequest{ID: parent.ID}); err != nil {
			t.Fatalf("round %d: stop: %v", r, err)
		}
	}
}

// TestCardinalityHoldsAcrossHosts: a role's cardinality is counted in the
// store's transaction, so it holds for the fleet. Under the hierarchy
// profile GO is a singleton: each round, 64 concurrent spawns of a GO
// spread over three hosts admit exactly one (the others are refused with
// cardinality_exceeded), which is then stopped, freeing the slot for the
// next round; 20 rounds.
func TestCardinalityHoldsAcrossHosts(t *testing.T) {
	f := fleettest.Start(t, fleettest.WithServeArgs("--profile", "hierarchy"))
	hosts := []*fleettest.Host{f.Host(t, "a"), f.Host(t, "b"), f.Host(t, "c")}
	ctx := context.Background()
	const spawns, rounds = 64, 20
	for r := range rounds {
		var admitted, refused atomic.Int64
		var winner atomic.Pointer[kin.Agent]
		var wg sync.WaitGroup
		start := make(chan struct{})
		for g := range spawns {
			wg.Go(func() {
				<-start
				ag, err := hosts[g%3].Client.Spawn(ctx, kin.SpawnRequest{
					RegisterRequest: kin.RegisterRequest{Name: fmt.Sprintf("GO-%d-%d", r, g), Role: "GO", Responsible: "fleettest"},
					Command:         []string{"sleep", "1000"},
				})
				switch code := kin.ErrorCodeOf(err); {
				case err == nil:
					admitted.Add(1)
					winner.Store(ag)
				case code == kin.ECodeCardinality:
					refused.Add(1)
				default:
					t.Errorf("round %d, spawn %d on %s: %v", r, g, hosts[g%3].Name, err)
				}
			})
		}
		close(start)
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
		if admitted.Load() != 1 || refused.Load() != spawns-1 {
			t.Fatalf("round %d: %d GOs admitted, %d refused; want exactly one", r, admitted.Load(), refused.Load())
		}
		// Stopped through another host, once it has followed the
		// registration (until then it answers not_found).
		stopper, id := hosts[(r+1)%3], winner.Load().ID
		kintest.WaitFor(t, 10*time.Second, stopper.Name+" to follow the GO's registration", func() bool {
			_, err := stopper.Client.Agent(ctx, id)
			return err == nil
		})
		if _, err := stopper.Client.Stop(ctx, kin.StopRequest{ID: id}); err != nil {
			t.Fatalf("round %d: stop: %v", r, err)
		}
	}
	verifyFleetLog(t, f, hosts[0], hosts[2], 0)
}
