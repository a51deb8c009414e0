package fleettest_test

import (
	"context"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/fleettest"
	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/kin"
)

// TestSingletonTakenOverOnlyAfterTheLease is seed 002's GO, a
// lease-renewed singleton across the fleet (issue 24): while GO's host
// holds its lease no second GO is admitted on any host; once host b is
// killed and its lease has expired (GO offline), a replacement is
// admitted on host a, and no third; when b comes back, its old GO, which
// still runs, is not brought back but stopped (end reason superseded), so
// the fleet has one GO again.
func TestSingletonTakenOverOnlyAfterTheLease(t *testing.T) {
	f := fleettest.Start(t, fenceArgs(), fleettest.WithServeArgs("--profile", "hierarchy"))
	a, b := f.Host(t, "a"), f.Host(t, "b")
	ctx := context.Background()
	goB := spawnOn(t, b, "GO", 0, time.Second, "sleep", "1000")
	logOnFailure(t, a, goB)
	spawnGO := func(h *fleettest.Host, name string) (*kin.Agent, error) {
		return h.Client.Spawn(ctx, kin.SpawnRequest{
			RegisterRequest: kin.RegisterRequest{Name: name, Role: "GO", Responsible: "fleettest"},
			Command:         []string{"sleep", "1000"},
		})
	}
	if _, err := spawnGO(a, "GO-early"); kin.ErrorCodeOf(err) != kin.ECodeCardinality {
		t.Fatalf("a second GO on a while b holds its lease: %v; want %s", err, kin.ECodeCardinality)
	}

	b.Kill9(t)
	// Before the lease runs out GO still holds the slot: a replacement
	// admitted now must have found it offline already.
	early, err := spawnGO(a, "GO-early")
	if got := agentOn(a, goB.ID); err == nil && (got == nil || got.State != kin.StateOffline) {
		t.Fatalf("a replacement GO was admitted while b's GO was %+v (lease not expired)", got)
	} else if err != nil && kin.ErrorCodeOf(err) != kin.ECodeCardinality {
		t.Fatalf("a replacement before the lease ran out: %v; want %s", err, kin.ECodeCardinality)
	}
	kintest.WaitFor(t, 30*time.Second, "b's GO offline, seen from a", func() bool {
		got := agentOn(a, goB.ID)
		return got != nil && got.State == kin.StateOffline
	})
	replacement := early
	if replacement == nil {
		if replacement, err = spawnGO(a, "GO-a"); err != nil {
			t.Fatalf("a replacement GO once b's lease expired: %v", err)
		}
	}
	if _, err := spawnGO(a, "GO-third"); kin.ErrorCodeOf(err) != kin.ECodeCardinality {
		t.Fatalf("a third GO beside the replacement: %v; want %s", err, kin.ECodeCardinality)
	}
	if !alive(goB.PID) {
		t.Fatal("b's GO died with its daemon")
	}

	b.Restart(t)
	kintest.WaitFor(t, 30*time.Second, "b's old GO stopped as superseded", func() bool {
		got := agentOn(a, goB.ID)
		return got != nil && !got.EndedAt.IsZero() && !alive(goB.PID)
	})
	if got := agentOn(a, goB.ID); got.EndReason != "superseded" || got.State != kin.StateCancelled {
		t.Errorf("b's old GO: %s, reason %q; want cancelled, superseded", got.State, got.EndReason)
	}
	if got := agentOn(a, replacement.ID); got == nil || got.State.Terminal() || !alive(replacement.PID) {
		t.Errorf("the replacement GO: %+v, alive %v; want it running", got, alive(replacement.PID))
	}
	all, err := a.Client.Agents(ctx, kin.AgentFilter{})
	if err != nil {
		t.Fatal(err)
	}
	live := 0
	for _, ag := range all {
		if ag.Role == "GO" && ag.Live() && ag.EndedAt.IsZero() {
			live++
		}
	}
	if live != 1 {
		t.Errorf("%d live GOs in the fleet after b's return; want 1", live)
	}
	verifyFleetLog(t, f, b, a, 0) // the takeover and the superseded GO are in the fleet's one log
}
