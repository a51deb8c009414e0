package fleettest_test

import (
	"context"
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/fleettest"
	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/kin"
)

// TestOwnedChildrenDieAcrossHosts is issue 24's cascade: a tree rooted on
// host a with children on b and c and grandchildren across all three; a
// SIGKILL of the root's process ends every descendant process on every
// host, each recorded cancelled (seed 001's agent.child.cancel and
// agent.stop) by the host that ran it, within 1 s plus the grace.
func TestOwnedChildrenDieAcrossHosts(t *testing.T) {
	f := fleettest.Start(t)
	a, b, c := f.Host(t, "a"), f.Host(t, "b"), f.Host(t, "c")
	ctx := context.Background()
	grace := kin.Duration(500 * time.Millisecond)
	spawn := func(h *fleettest.Host, name string, parent kin.AgentID) *kin.Agent {
		t.Helper()
		return spawnOn(t, h, name, parent, time.Duration(grace), "sleep", "1000")
	}
	root := spawn(a, "root", 0)
	kb := spawn(b, "kid-b", root.ID)
	kc := spawn(c, "kid-c", root.ID)
	tree := []*kin.Agent{kb, kc,
		spawn(a, "grand-a", kb.ID), spawn(b, "grand-b", kc.ID), spawn(c, "grand-c", kb.ID), spawn(c, "grand-c2", kc.ID)}
	for _, ag := range append([]*kin.Agent{root}, tree...) {
		if err := syscall.Kill(ag.PID, 0); err != nil {
			t.Fatalf("%s's process %d: %v", ag.Name, ag.PID, err)
		}
	}
	start := time.Now()
	if err := syscall.Kill(root.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	ids := make([]kin.AgentID, len(tree))
	for i, ag := range tree {
		ids[i] = ag.ID
	}
	var gone, recorded time.Duration
	t.Cleanup(func() {
		if t.Failed() {
			for _, ag := range tree {
				got, err := a.Client.Agent(ctx, ag.ID)
				alive := syscall.Kill(ag.PID, 0) == nil
				if err != nil {
					t.Logf("%s: %v", ag.Name, err)
					continue
				}
				t.Logf("%s on %s: %s/%s ended %v process alive %v", ag.Name, got.Host, got.Status, got.State, got.EndedAt, alive)
			}
			evs, _ := a.Client.Events(ctx, kin.EventFilter{Since: 0})
			for _, e := range evs {
				t.Logf("event %d %s agent %d %s", e.Seq, e.Type, e.Agent, e.Data)
			}
		}
	})
	kintest.WaitFor(t, 30*time.Second, "every descendant's process gone and its end recorded", func() bool {
		if gone == 0 && !slices.ContainsFunc(tree, func(ag *kin.Agent) bool { return syscall.Kill(ag.PID, 0) == nil }) {
			gone = time.Since(start)
		}
		if recorded == 0 {
			n := 0
			for _, id := range ids {
				if got, err := a.Client.Agent(ctx, id); err == nil && got.State == kin.StateCancelled && !got.EndedAt.IsZero() {
					n++
				}
			}
			if n == len(ids) {
				recorded = time.Since(start)
			}
		}
		return gone > 0 && recorded > 0
	})
	t.Logf("root SIGKILLed on a: %d descendants on 3 hosts gone in %s, all recorded cancelled in %s (grace %s)",
		len(tree), gone.Round(time.Millisecond), recorded.Round(time.Millisecond), time.Duration(grace))
	if limit := time.Second + time.Duration(grace); recorded > limit {
		t.Errorf("the cascade took %s; want within 1 s plus the grace (%s)", recorded, limit)
	}
	// Each host recorded its own agents, with seed 001's events; the
	// records name the host that ran each.
	for _, ag := range tree {
		got, err := b.Client.Agent(ctx, ag.ID)
		if err != nil || got.Host != ag.Host || got.Status != kin.StatusTerminated {
			t.Errorf("%s: %+v, %v", ag.Name, got, err)
		}
		evs, err := c.Client.Events(ctx, kin.EventFilter{Agent: ag.ID, Types: []string{kin.EventChildCancel, kin.EventAgentStop}})
		if err != nil {
			t.Fatal(err)
		}
		var types []string
		for _, e := range evs {
			if e.Agent == ag.ID {
				types = append(types, e.Type)
			}
		}
		if fmt.Sprint(types) != fmt.Sprint([]string{kin.EventChildCancel, kin.EventAgentStop}) {
			t.Errorf("%s's events: %v", ag.Name, types)
		}
	}
	verifyFleetLog(t, f, b, c, 0) // the cascade is in the fleet's one log
}
