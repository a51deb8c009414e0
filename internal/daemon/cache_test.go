package daemon_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"

	"github.com/kin-agents/kin/internal/daemon"
	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/kin"
)

// failingStore is the real store whose Updates fail, after their function
// ran, when their context carries failKey: from the daemon's side, a
// commit that failed. A real COMMIT cannot be made to fail on demand here,
// hence the injection.
type failingStore struct{ store.Store }

type failKey struct{}

var errInjected = errors.New("injected: the commit failed")

func (f failingStore) Update(ctx context.Context, fn func(store.Tx) error) error {
	return f.Store.Update(ctx, func(tx store.Tx) error {
		if err := fn(tx); err != nil {
			return err
		}
		if ctx.Value(failKey{}) != nil {
			return errInjected // the savepoint is undone; the batch's others commit
		}
		return nil
	})
}

// TestFailedCommitLeavesEveryCacheUnchanged_InjectedFailure: each write
// that changes a cache (a registration, usage, a promotion, a governor
// setting) fails its commit while other registrations commit beside it;
// every cache (lineage, permissions and spend, the governor's profile) must
// still agree with the store, and what the API answers must not change.
// Before issue 20, Usage and Promote changed the cache inside the
// transaction and never undid it.
func TestFailedCommitLeavesEveryCacheUnchanged_InjectedFailure(t *testing.T) {
	d := kintest.StartDaemon(t, func(c *daemon.Config) {
		c.WrapStore = func(s store.Store) store.Store { return failingStore{s} }
	})
	svc := d.Daemon // in process: the failing context reaches the store
	hundred, five := int64(100), int64(5)
	lead := register(t, svc, kin.RegisterRequest{Name: "lead", Responsible: "x",
		Policy: &kin.Policy{Budget: &kin.Budget{MaxTokens: &hundred, MaxDescendants: &five}}})
	child := register(t, svc, kin.RegisterRequest{Name: "child", Parent: lead.ID, Policy: &kin.Policy{Tools: &kin.ToolRules{Allow: []string{"read"}}}})
	if _, err := svc.Usage(ctx, kin.UsageRequest{Agent: child.ID, Tokens: 10}); err != nil {
		t.Fatal(err)
	}
	fail := context.WithValue(ctx, failKey{}, true)
	bystander := 0
	for _, w := range []struct {
		name string
		do   func() error
	}{
		{"register", func() error {
			_, err := svc.Register(fail, kin.RegisterRequest{Name: "grandchild", Parent: child.ID, Policy: &kin.Policy{Tools: &kin.ToolRules{Allow: []string{"read"}}}})
			return err
		}},
		{"usage", func() error {
			_, err := svc.Usage(fail, kin.UsageRequest{Agent: child.ID, Tokens: 20, Cost: 0.5})
			return err
		}},
		{"usage reaching the cap", func() error {
			_, err := svc.Usage(fail, kin.UsageRequest{Agent: child.ID, Tokens: 500})
			return err
		}},
		{"promote", func() error {
			_, err := svc.Promote(fail, kin.PromoteRequest{Agent: child.ID, Stage: "restricted"})
			return err
		}},
		{"governor", func() error {
			_, err := svc.SetGovernor(fail, "max_children", "1")
			return err
		}},
	} {
		t.Run(w.name, func(t *testing.T) {
			before := snapshot(t, svc, lead.ID, child.ID)
			// Registrations that commit beside the failing write.
			var wg sync.WaitGroup
			for range 8 {
				bystander++
				name := fmt.Sprintf("bystander-%d", bystander)
				wg.Add(1)
				go func() {
					defer wg.Done()
					if _, err := svc.Register(ctx, kin.RegisterRequest{Name: name, Responsible: "x"}); err != nil {
						t.Errorf("register %s beside the failing write: %v", name, err)
					}
				}()
			}
			err := w.do()
			wg.Wait()
			if err == nil || !errors.Is(err, errInjected) && kin.ErrorCodeOf(err) != kin.ECodeInternal {
				t.Fatalf("the failing write answered %v, want the injected failure", err)
			}
			if diff, err := d.Daemon.CacheDiff(ctx); err != nil || diff != "" {
				t.Fatalf("after a failed commit the caches disagree with the store (%v):\n%s", err, diff)
			}
			if after := snapshot(t, svc, lead.ID, child.ID); !reflect.DeepEqual(before, after) {
				t.Fatalf("a failed commit changed what the API answers:\nbefore %+v\nafter  %+v", before, after)
			}
		})
	}
	// The same writes without the failure do change the caches, in step
	// with the store.
	if _, err := svc.Usage(ctx, kin.UsageRequest{Agent: child.ID, Tokens: 20}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Promote(ctx, kin.PromoteRequest{Agent: child.ID, Stage: "restricted"}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.SetGovernor(ctx, "max_children", "7"); err != nil {
		t.Fatal(err)
	}
	register(t, svc, kin.RegisterRequest{Name: "grandchild", Parent: child.ID})
	if diff, err := d.Daemon.CacheDiff(ctx); err != nil || diff != "" {
		t.Fatalf("after committed writes the caches disagree with the store (%v):\n%s", err, diff)
	}
	pol, err := svc.Policy(ctx, lead.ID)
	if err != nil || pol.Spend.SubtreeTokens != 30 || pol.Spend.SubtreeSpawns != 2 {
		t.Fatalf("lead's spend after the committed writes: %+v (%v); want 30 tokens, 2 spawns", pol.Spend, err)
	}
}

// apiView is what the API answers about the agents a cache feeds.
type apiView struct {
	Spend    []kin.Spend
	Stage    string
	Children int
	Governor kin.Profile
	Tree     int
}

func snapshot(t *testing.T, svc kin.Service, lead, child kin.AgentID) apiView {
	t.Helper()
	var v apiView
	for _, id := range []kin.AgentID{lead, child} {
		p, err := svc.Policy(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		v.Spend = append(v.Spend, p.Spend)
		v.Stage = p.Stage
	}
	kids, err := svc.Children(ctx, child)
	if err != nil {
		t.Fatal(err)
	}
	v.Children = len(kids)
	g, err := svc.Governor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	v.Governor = g.Profile
	tree, err := svc.Tree(ctx, lead)
	if err != nil {
		t.Fatal(err)
	}
	v.Tree = len(tree)
	return v
}
