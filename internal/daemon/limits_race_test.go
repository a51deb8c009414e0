package daemon_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/kin"
)

// Issue 20: registrations that the store commits in one batch must see
// each other. The spawn count a max_descendants budget reads used to be
// kept in the daemon's memory and raised only after the commit, so 64
// parallel registrations under a budget of 2 let 3, or all 64, through.
// These race 64 registrations against each limit, 20 rounds, through the
// HTTP API (the client on the daemon's socket) and through the in-process
// service, and count exactly what each limit allows.

const (
	raceWidth  = 64
	raceRounds = 20
)

func TestLimitsHoldUnder64ConcurrentRegistrations(t *testing.T) {
	t.Run("max_descendants", func(t *testing.T) {
		d := kintest.StartDaemon(t)
		for _, via := range []struct {
			name string
			svc  kin.Service
		}{{"http", d.Client}, {"in-process", d.Daemon}} {
			t.Run(via.name, func(t *testing.T) {
				for r := range raceRounds {
					two := int64(2)
					lead := register(t, via.svc, kin.RegisterRequest{Name: fmt.Sprintf("lead-%s-%d", via.name, r), Responsible: "x",
						Policy: &kin.Policy{Budget: &kin.Budget{MaxDescendants: &two}}})
					ok, codes := race(via.svc, raceWidth, func(i int) kin.RegisterRequest {
						return kin.RegisterRequest{Name: fmt.Sprintf("c-%s-%d-%d", via.name, r, i), Parent: lead.ID}
					})
					if ok != 2 || codes[kin.ECodeBudget] != raceWidth-2 {
						t.Fatalf("round %d: %d children of a parent with max_descendants 2 passed (%v); want 2, the rest budget_exhausted", r, ok, codes)
					}
					// A grandparent's budget counts its grandchildren: with
					// one child spawned, one more descendant may come.
					top := register(t, via.svc, kin.RegisterRequest{Name: fmt.Sprintf("top-%s-%d", via.name, r), Responsible: "x",
						Policy: &kin.Policy{Budget: &kin.Budget{MaxDescendants: &two}}})
					mid := register(t, via.svc, kin.RegisterRequest{Name: fmt.Sprintf("mid-%s-%d", via.name, r), Parent: top.ID})
					ok, codes = race(via.svc, raceWidth, func(i int) kin.RegisterRequest {
						return kin.RegisterRequest{Name: fmt.Sprintf("g-%s-%d-%d", via.name, r, i), Parent: mid.ID}
					})
					if ok != 1 || codes[kin.ECodeBudget] != raceWidth-1 {
						t.Fatalf("round %d: %d grandchildren passed under a grandparent with max_descendants 2 and one child (%v); want 1", r, ok, codes)
					}
					pol, err := via.svc.Policy(ctx, top.ID)
					if err != nil || pol.Spend.SubtreeSpawns != 2 {
						t.Fatalf("round %d: the grandparent's spawns = %+v (%v), want 2", r, pol, err)
					}
				}
			})
		}
	})
	t.Run("max_children and cardinality", func(t *testing.T) {
		clock := kintest.NewClock()
		d := kintest.StartDaemon(t, kintest.WithProfile("hierarchy"), kintest.WithClock(clock.Now))
		goA := register(t, d.Client, kin.RegisterRequest{Name: "GO", Responsible: "XIOPro"})
		for _, via := range []struct {
			name string
			svc  kin.Service
		}{{"http", d.Client}, {"in-process", d.Daemon}} {
			t.Run(via.name, func(t *testing.T) {
				for r := range raceRounds {
					// max_children 3: a fresh PO each round, so that its
					// circuit breaker starts closed.
					po := register(t, via.svc, kin.RegisterRequest{Name: fmt.Sprintf("PO@%s%d", via.name, r), Role: "PO", Parent: goA.ID})
					ok, codes := race(via.svc, raceWidth, func(i int) kin.RegisterRequest {
						return kin.RegisterRequest{Name: fmt.Sprintf("W-%s-%d-%d", via.name, r, i), Role: "Worker", Parent: po.ID}
					})
					// After 5 rejections the breaker refuses the rest.
					if ok != 3 || codes[kin.ECodeMaxChildren] != 6 || codes[kin.ECodeCircuitOpen] != raceWidth-3-6 {
						t.Fatalf("round %d: %d workers passed under a max_children of 3 (%v); want 3, then 6 max_children_exceeded, then the breaker", r, ok, codes)
					}
					// One IO per context.
					ok, codes = race(via.svc, raceWidth, func(i int) kin.RegisterRequest {
						return kin.RegisterRequest{Name: fmt.Sprintf("io%d@%s%d", i, via.name, r), Role: "IO", Parent: goA.ID}
					})
					if ok != 1 || codes[kin.ECodeCardinality] != 6 || codes[kin.ECodeCircuitOpen] != raceWidth-1-6 {
						t.Fatalf("round %d: %d IOs of one context passed (%v); want 1, then 6 cardinality_exceeded, then the breaker", r, ok, codes)
					}
					// End the round: GO's children go (GO may have 3 at once)
					// and its breaker's cooldown passes.
					kids, err := via.svc.Children(ctx, goA.ID)
					if err != nil {
						t.Fatal(err)
					}
					for _, k := range kids {
						if k.Status == kin.StatusTerminated {
							continue
						}
						if _, err := via.svc.SetStatus(ctx, kin.StatusRequest{ID: k.ID, Action: kin.ActionTerminate, Cascade: true, Reason: "round over"}); err != nil {
							t.Fatalf("terminate %s: %v", k.Name, err)
						}
					}
					clock.Advance(10 * time.Minute)
				}
			})
		}
	})
}
