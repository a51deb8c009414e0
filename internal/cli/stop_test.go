package cli

import (
	"context"
	"fmt"
	"slices"
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
	wantUsage(t, kinAt(t, d, "stop"), "one or more agent IDs")
	wantUsage(t, kinAt(t, d, "stop", "1", "--grace", "-1s"), "--grace")
	wantUsage(t, kinAt(t, d, "stop", "1", "--grace", "soon"), "--grace")
}

// TestStopSeveral: several agents are stopped side by side, each with its
// owned subtree, and each once where one is inside another's subtree; a
// bad argument stops nothing; where some cannot be stopped the others
// still are, and the command fails naming those that were not.
func TestStopSeveral(t *testing.T) {
	d := kintest.StartDaemon(t)
	boss := spawnJSON(t, d, "--name", "boss", "--responsible", "ops", "--", "sleep", "600")
	helper := spawnJSON(t, d, "--name", "helper", "--parent", boss.ID.String(), "--", "sleep", "600")
	other := spawnJSON(t, d, "--name", "other", "--responsible", "ops", "--", "sleep", "600")
	third := spawnJSON(t, d, "--name", "third", "--responsible", "ops", "--", "sleep", "600")
	last := spawnJSON(t, d, "--name", "last", "--responsible", "ops", "--", "sleep", "600")
	running := func(a *kin.Agent) bool {
		t.Helper()
		got, err := d.Client.Agent(context.Background(), a.ID)
		if err != nil {
			t.Fatal(err)
		}
		return got.Running()
	}

	// A bad argument anywhere: nothing is stopped.
	wantError(t, kinAt(t, d, "stop", other.ID.String(), "no-such-agent", "--json"), kin.ECodeInvalid)
	if !running(other) {
		t.Fatal("a stop with a bad argument stopped the agent before it")
	}

	// The helper is named and inside the boss's subtree; the boss is named twice.
	r := kinAt(t, d, "stop", helper.ID.String(), boss.ID.String(), "other", boss.ID.String(), "--grace", "0s", "--json")
	wantOK(t, r)
	var stopped []*kin.Agent
	decodeOne(t, r.stdout, &stopped)
	for _, a := range stopped {
		if a.State != kin.StateCancelled || a.Running() {
			t.Errorf("agent %d in the answer: state %s, running %v", a.ID, a.State, a.Running())
		}
	}
	if got, want := agentIDs(stopped), []kin.AgentID{boss.ID, helper.ID, other.ID}; !slices.Equal(got, want) {
		t.Errorf("stopped %v, want %v (each once, by id)", got, want)
	}
	if !running(third) || !running(last) {
		t.Error("an agent not named was stopped")
	}

	// One ended already, two live: those two are stopped, and the command
	// fails with the ended one's error, naming it.
	r = kinAt(t, d, "stop", third.ID.String(), boss.ID.String(), last.ID.String(), "--grace", "0s")
	if r.code != ExitError {
		t.Fatalf("exit %d, want 1\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	if !strings.HasSuffix(r.stdout, "2 agents stopped\n") || !strings.Contains(r.stdout, "third") || !strings.Contains(r.stdout, "last") {
		t.Errorf("stdout does not list the two stopped:\n%s", r.stdout)
	}
	if want := fmt.Sprintf("agent %d ", boss.ID); !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, string(kin.ECodeInvalidTransition)) {
		t.Errorf("stderr does not name %q with %s:\n%s", want, kin.ECodeInvalidTransition, r.stderr)
	}
	if running(third) || running(last) {
		t.Error("the live agents named beside an ended one were not stopped")
	}

	// None can be stopped: nothing on stdout, one error naming both, with
	// the first's code.
	msg := wantError(t, kinAt(t, d, "stop", boss.ID.String(), "99", "--json"), kin.ECodeInvalidTransition)
	if !strings.Contains(msg, "2 agents not stopped") || !strings.Contains(msg, "agent 99") || !strings.Contains(msg, "["+string(kin.ECodeNotFound)+"]") {
		t.Errorf("message %q does not name both failures", msg)
	}
}
