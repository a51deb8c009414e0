package cli

import (
	"context"
	"strings"
	"testing"

	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/kin"
)

func TestStop(t *testing.T) {
	d := kintest.StartDaemon(t)
	root := spawnJSON(t, d, "--name", "boss", "--responsible", "ops", "--", "sleep", "600")
	child := spawnJSON(t, d, "--name", "helper", "--parent", root.ID.String(), "--", "sleep", "600")
	other := spawnJSON(t, d, "--name", "bystander", "--responsible", "ops", "--", "sleep", "600")

	r := kinAt(t, d, "stop", root.ID.String(), "--grace", "0s")
	wantOK(t, r)
	lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
	if len(lines) != 4 || lines[3] != "2 agents stopped" {
		t.Fatalf("output:\n%s", r.stdout)
	}
	if got := strings.Fields(lines[0]); strings.Join(got, " ") != "ID NAME ROLE PARENT GEN STATUS STATE PID END RESPONSIBLE" {
		t.Errorf("header %q", lines[0])
	}
	for _, a := range []*kin.Agent{root, child} {
		got, err := d.Client.Agent(context.Background(), a.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State != kin.StateCancelled || got.EndReason != "stopped" || got.EndedAt.IsZero() || got.Running() {
			t.Errorf("agent %d after stop: %+v", a.ID, got)
		}
		if !strings.Contains(r.stdout, a.Name) {
			t.Errorf("output does not list %s:\n%s", a.Name, r.stdout)
		}
	}
	if got, err := d.Client.Agent(context.Background(), other.ID); err != nil || !got.Running() {
		t.Errorf("an agent outside the subtree was touched: %+v, %v", got, err)
	}

	// Stopped already: nothing to do.
	wantError(t, kinAt(t, d, "stop", root.ID.String(), "--json"), kin.ECodeInvalidTransition)

	r = kinAt(t, d, "stop", other.ID.String(), "--json")
	wantOK(t, r)
	var stopped []*kin.Agent
	decodeOne(t, r.stdout, &stopped)
	if len(stopped) != 1 || stopped[0].ID != other.ID || stopped[0].Exit == nil {
		t.Fatalf("stopped = %+v", stopped)
	}
	// Its own grace (5s) was not needed: sleep ends on SIGTERM.
	if e := *stopped[0].Exit; e.Signal != "terminated" {
		t.Errorf("exit = %+v, want the SIGTERM", e)
	}
}

func TestStopErrors(t *testing.T) {
	d := kintest.StartDaemon(t)
	wantError(t, kinAt(t, d, "stop", "99", "--json"), kin.ECodeNotFound)
	wantError(t, kinAt(t, d, "stop", "abc", "--json"), kin.ECodeInvalid)
	wantUsage(t, kinAt(t, d, "stop"), "one agent ID")
	wantUsage(t, kinAt(t, d, "stop", "1", "2"), "one agent ID")
	wantUsage(t, kinAt(t, d, "stop", "1", "--grace", "-1s"), "--grace")
	wantUsage(t, kinAt(t, d, "stop", "1", "--grace", "soon"), "--grace")
}
