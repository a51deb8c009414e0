package cli

import (
	"strconv"
	"strings"
	"testing"

	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/kin"
)

func TestShow(t *testing.T) {
	d := kintest.StartDaemon(t)
	seedLineage(t, d)
	r := kinAt(t, d, "show", "7")
	wantOK(t, r)
	for _, want := range []string{"LaTeX-Formatter", "formatter", "Parent          3", "Generation      2", "Responsible     Dr. Schmidt", "Status          active", "by operator"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, r.stdout)
		}
	}
	r = kinAt(t, d, "show", "#7", "--json")
	wantOK(t, r)
	var a kin.Agent
	decodeOne(t, r.stdout, &a)
	if a.ID != 7 || a.Name != "LaTeX-Formatter" || a.Parent != 3 || a.Generation != 2 {
		t.Errorf("agent = %+v", a)
	}
}

// TestShowRuntime: a spawned agent's process while it runs, and how it ended.
func TestShowRuntime(t *testing.T) {
	d := kintest.StartDaemon(t)
	a := spawnJSON(t, d, "--name", "worker", "--responsible", "ops", "--grace", "1s", "--restart", "on-failure", "sleep", "600")
	r := kinAt(t, d, "show", a.ID.String())
	wantOK(t, r)
	sleep := mustLookPath(t, "sleep")
	for _, want := range []string{
		"Command         " + sleep + " 600\n",
		"PID             " + strconv.Itoa(a.PID) + "\n",
		"Started         " + formatTime(a.StartedAt) + "\n",
		"Restart         on-failure\n",
		"Grace           1s\n",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "Exit") || strings.Contains(r.stdout, "Ended") {
		t.Errorf("a running agent shows an end:\n%s", r.stdout)
	}
	wantOK(t, kinAt(t, d, "stop", a.ID.String(), "--grace", "0s"))
	ended := waitEnded(t, d, a.ID)
	r = kinAt(t, d, "show", a.ID.String())
	wantOK(t, r)
	for _, want := range []string{
		"Ended           " + formatTime(ended.EndedAt) + "\n",
		"Exit            signal killed\n",
		"End reason      stopped\n",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "PID") {
		t.Errorf("an ended agent shows a pid:\n%s", r.stdout)
	}
	r = kinAt(t, d, "show", a.ID.String(), "--json")
	wantOK(t, r)
	var got kin.Agent
	decodeOne(t, r.stdout, &got)
	if got.PID != a.PID || got.Exit == nil || got.Exit.Signal != "killed" || got.EndReason != "stopped" {
		t.Errorf("agent = %+v", got)
	}
}

func TestShowErrors(t *testing.T) {
	d := kintest.StartDaemon(t)
	seedLineage(t, d)
	for _, bad := range []string{"abc", "0", "-1", "1.5", "#"} {
		args := []string{"show", bad, "--json"}
		if strings.HasPrefix(bad, "-") {
			args = []string{"show", "--json", "--", bad}
		}
		msg := wantError(t, kinAt(t, d, args...), kin.ECodeInvalid)
		if !strings.Contains(msg, "argument ID") || !strings.Contains(msg, `"`+bad+`"`) {
			t.Errorf("show %s: message %q does not name the argument", bad, msg)
		}
	}
	// "-1" without "--" looks like a flag to the parser; it is still a bad id.
	msg := wantError(t, kinAt(t, d, "show", "-1", "--json"), kin.ECodeInvalid)
	if !strings.Contains(msg, `"-1"`) {
		t.Errorf("message %q", msg)
	}
	r := kinAt(t, d, "show", "abc")
	if r.code != ExitError || !strings.HasPrefix(r.stderr, "kin: argument ID \"abc\"") || !strings.HasSuffix(r.stderr, "(invalid)\n") {
		t.Errorf("exit %d, stderr %q", r.code, r.stderr)
	}

	msg = wantError(t, kinAt(t, d, "show", "99", "--json"), kin.ECodeNotFound)
	if !strings.Contains(msg, "99") {
		t.Errorf("message %q", msg)
	}
	r = kinAt(t, d, "show", "99")
	if r.code != ExitError || r.stderr != "kin: agent 99 not found (not_found)\n" {
		t.Errorf("exit %d, stderr %q", r.code, r.stderr)
	}
	wantUsage(t, kinAt(t, d, "show"), "one agent ID")
	wantUsage(t, kinAt(t, d, "show", "1", "2"), "one agent ID")
	wantUsage(t, kinAt(t, d, "show", "1", "--bogus"), "--bogus")
}
