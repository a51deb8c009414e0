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

func TestPs(t *testing.T) {
	d := kintest.StartDaemon(t)
	wantOK(t, kinAt(t, d, "ps"))
	r := kinAt(t, d, "ps", "--json")
	wantOK(t, r)
	if strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("empty registry: %q, want []", r.stdout)
	}

	seedLineage(t, d)
	if _, err := d.Client.Register(context.Background(), kin.RegisterRequest{Name: "Other", Responsible: "ACME"}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Client.SetStatus(context.Background(), kin.StatusRequest{ID: 3, Action: kin.ActionSuspend}); err != nil {
		t.Fatal(err)
	}
	r = kinAt(t, d, "ps")
	wantOK(t, r)
	lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
	if len(lines) != 9 {
		t.Fatalf("%d lines, want header + 8:\n%s", len(lines), r.stdout)
	}
	if got := strings.Fields(lines[0]); strings.Join(got, " ") != "ID NAME ROLE PARENT GEN STATUS STATE PID END RESPONSIBLE" {
		t.Errorf("header = %q", lines[0])
	}
	if got := strings.Join(strings.Fields(lines[1]), " "); got != "1 Research-Coordinator coordinator - 0 active registered - - Dr. Schmidt" {
		t.Errorf("row 1 = %q", got)
	}
	if got := strings.Join(strings.Fields(lines[7]), " "); got != "7 LaTeX-Formatter formatter 3 2 active registered - - Dr. Schmidt" {
		t.Errorf("row 7 = %q", got)
	}

	for _, c := range []struct {
		args []string
		want []kin.AgentID
	}{
		{[]string{"--status", "suspended"}, []kin.AgentID{3}},
		{[]string{"--parent", "0"}, []kin.AgentID{1, 8}},
		{[]string{"--parent", "2"}, []kin.AgentID{5, 6}},
		{[]string{"--role", "writer"}, []kin.AgentID{3}},
		{[]string{"--responsible", "ACME"}, []kin.AgentID{8}},
		{[]string{"--state", "registered", "--status", "active", "--parent", "1"}, []kin.AgentID{2, 4}},
	} {
		r := kinAt(t, d, append([]string{"ps", "--json"}, c.args...)...)
		wantOK(t, r)
		var agents []*kin.Agent
		decodeOne(t, r.stdout, &agents)
		if got := agentIDs(agents); !slices.Equal(got, c.want) {
			t.Errorf("ps %v = %v, want %v", c.args, got, c.want)
		}
	}
}

// TestPsRuntime: a running agent shows its pid; an ended one how it ended.
func TestPsRuntime(t *testing.T) {
	d := kintest.StartDaemon(t)
	running := spawnJSON(t, d, "--name", "runner", "--responsible", "ops", "sleep", "600")
	failed := spawnJSON(t, d, "--name", "crasher", "--responsible", "ops", "sh", "-c", "exit 3")
	waitEnded(t, d, failed.ID)
	stopped := spawnJSON(t, d, "--name", "stopped", "--responsible", "ops", "sleep", "600")
	wantOK(t, kinAt(t, d, "stop", stopped.ID.String(), "--grace", "0s"))
	r := kinAt(t, d, "ps")
	wantOK(t, r)
	lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
	if len(lines) != 4 {
		t.Fatalf("output:\n%s", r.stdout)
	}
	for i, want := range []string{
		fmt.Sprintf("%d runner - - 0 active %s %d - ops", running.ID, running.State, running.PID),
		fmt.Sprintf("%d crasher - - 0 terminated exited - exit 3 (crashed) ops", failed.ID),
		fmt.Sprintf("%d stopped - - 0 terminated cancelled - signal killed (stopped) ops", stopped.ID),
	} {
		if got := strings.Join(strings.Fields(lines[i+1]), " "); got != want {
			t.Errorf("row %d = %q, want %q", i+1, got, want)
		}
	}
}

// agentIDs is the ids of agents, in their order.
func agentIDs(agents []*kin.Agent) []kin.AgentID {
	ids := make([]kin.AgentID, len(agents))
	for i, a := range agents {
		ids[i] = a.ID
	}
	return ids
}

func TestPsErrors(t *testing.T) {
	d := kintest.StartDaemon(t)
	wantUsage(t, kinAt(t, d, "ps", "--status", "sleeping"), "--status", "active, suspended")
	wantUsage(t, kinAt(t, d, "ps", "--state", "sleeping"), "--state")
	wantUsage(t, kinAt(t, d, "ps", "--parent", "abc"), "--parent")
	wantUsage(t, kinAt(t, d, "ps", "--bogus"), "--bogus")
	wantUsage(t, kinAt(t, d, "ps", "1"), `"1"`)
	r := kinAt(t, d, "ps", "--status", "sleeping", "--json")
	wantUsage(t, r)
	var e kin.Error
	decodeOne(t, r.stderr, &e)
	if !strings.Contains(e.Message, "--status") {
		t.Errorf("error = %+v", e)
	}
}
