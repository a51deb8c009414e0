package cli

import (
	"context"
	"strings"
	"testing"

	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/kin"
)

func statusOf(t *testing.T, d *kintest.Daemon, id kin.AgentID) kin.Status {
	t.Helper()
	a, err := d.Client.Agent(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return a.Status
}

func TestSuspendResumeRevokeTerminate(t *testing.T) {
	d := kintest.StartDaemon(t)
	seedLineage(t, d)

	r := kinAt(t, d, "suspend", "3", "--cascade", "--reason", "audit 42")
	wantOK(t, r)
	lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
	if len(lines) != 4 || !strings.Contains(lines[1], "Report-Writer") || !strings.Contains(lines[2], "LaTeX-Formatter") ||
		!strings.Contains(lines[1], "suspended") || lines[3] != "2 agents suspended" {
		t.Fatalf("suspend output:\n%s", r.stdout)
	}
	evs, err := d.Client.Events(context.Background(), kin.EventFilter{Agent: 3, Types: []string{kin.EventAgentStatus}})
	if err != nil || len(evs) == 0 || evs[0].Agent != 3 {
		t.Fatalf("events = %v, %v", evs, err)
	}
	var reason string
	if err := evs[0].Field("reason", &reason); err != nil || reason != "audit 42" {
		t.Errorf("reason = %q, %v", reason, err)
	}

	r = kinAt(t, d, "resume", "3", "--json")
	wantOK(t, r)
	var changed []*kin.Agent
	decodeOne(t, r.stdout, &changed)
	if len(changed) != 1 || changed[0].ID != 3 || changed[0].Status != kin.StatusActive {
		t.Errorf("resume changed %+v", changed)
	}
	if statusOf(t, d, 7) != kin.StatusSuspended {
		t.Errorf("#7 resumed without --cascade")
	}
	wantOK(t, kinAt(t, d, "resume", "3", "--cascade", "--json")) // #3 is active already; #7 is not
	if statusOf(t, d, 7) != kin.StatusActive {
		t.Errorf("#7 not resumed by --cascade")
	}

	r = kinAt(t, d, "revoke", "2")
	wantOK(t, r)
	if !strings.HasSuffix(r.stdout, "\n1 agent revoked\n") {
		t.Errorf("revoke output:\n%s", r.stdout)
	}
	if statusOf(t, d, 5) != kin.StatusActive {
		t.Errorf("#5 revoked without --cascade")
	}

	r = kinAt(t, d, "terminate", "1", "--cascade", "--json")
	wantOK(t, r)
	decodeOne(t, r.stdout, &changed)
	if len(changed) != 7 {
		t.Errorf("terminate --cascade changed %d agents, want 7", len(changed))
	}
	for _, a := range changed {
		if a.Status != kin.StatusTerminated || a.State != kin.StateTerminated {
			t.Errorf("#%d is %s/%s", a.ID, a.Status, a.State)
		}
	}
}

func TestStatusChangeErrors(t *testing.T) {
	d := kintest.StartDaemon(t)
	seedLineage(t, d)
	before := lastEvent(t, d)
	for _, action := range []string{"suspend", "resume", "revoke", "terminate"} {
		for _, bad := range []string{"abc", "0", "-1"} {
			msg := wantError(t, kinAt(t, d, action, bad, "--cascade", "--json"), kin.ECodeInvalid)
			if !strings.Contains(msg, `argument ID "`+bad+`"`) {
				t.Errorf("%s %s: message %q", action, bad, msg)
			}
		}
		wantError(t, kinAt(t, d, action, "99", "--json"), kin.ECodeNotFound)
		wantUsage(t, kinAt(t, d, action), "one agent ID")
		wantUsage(t, kinAt(t, d, action, "1", "--bogus"), "--bogus")
	}
	if got := lastEvent(t, d); got != before {
		t.Errorf("failed commands wrote events: last event %d, was %d", got, before)
	}
	for id := kin.AgentID(1); id <= 7; id++ {
		if s := statusOf(t, d, id); s != kin.StatusActive {
			t.Errorf("#%d is %s", id, s)
		}
	}

	msg := wantError(t, kinAt(t, d, "resume", "1", "--json"), kin.ECodeInvalidTransition)
	if !strings.Contains(msg, "active") {
		t.Errorf("message %q", msg)
	}
	r := kinAt(t, d, "resume", "1")
	if r.code != ExitError || !strings.HasSuffix(r.stderr, "(invalid_transition)\n") {
		t.Errorf("exit %d, stderr %q", r.code, r.stderr)
	}
}
