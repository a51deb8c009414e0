package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/kin-agents/kin/kin"
)

func TestCommandString(t *testing.T) {
	for _, c := range []struct {
		argv []string
		want string
	}{
		{[]string{"/usr/bin/python3", "-u", "agent.py", "--name=x"}, "/usr/bin/python3 -u agent.py --name=x"},
		{[]string{"sh", "-c", "echo hi; exit 1"}, "sh -c 'echo hi; exit 1'"},
		{[]string{"echo", "it's", ""}, `echo 'it'\''s' ''`},
		{[]string{"printf", "a\nb"}, "printf 'a\nb'"},
	} {
		if got := commandString(c.argv); got != c.want {
			t.Errorf("commandString(%q) = %q, want %q", c.argv, got, c.want)
		}
	}
}

func TestEndString(t *testing.T) {
	ended := time.Date(2026, 3, 30, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		a         kin.Agent
		pid, want string
	}{
		{kin.Agent{}, "-", "-"},
		{kin.Agent{PID: 42}, "42", "-"},
		{kin.Agent{PID: 42, EndedAt: ended, Exit: &kin.Exit{Code: 0, Known: true}, EndReason: "exited"}, "-", "exit 0 (exited)"},
		{kin.Agent{PID: 42, EndedAt: ended, Exit: &kin.Exit{Code: -1, Signal: "killed", Known: true}, EndReason: "stopped"}, "-", "signal killed (stopped)"},
		{kin.Agent{PID: 42, EndedAt: ended, Exit: &kin.Exit{Code: -1}, EndReason: "lost"}, "-", "unknown (lost)"},
		{kin.Agent{EndedAt: ended, EndReason: "start_failed"}, "-", "start_failed"},
	} {
		if got := pidString(&c.a); got != c.pid {
			t.Errorf("pidString(%+v) = %q, want %q", c.a, got, c.pid)
		}
		if got := endString(&c.a); got != c.want {
			t.Errorf("endString(%+v) = %q, want %q", c.a, got, c.want)
		}
	}
}

// TestUncheckedAgentIsMarked: an agent a restarted daemon has not yet
// checked shows its state as the store's, marked unchecked, in kin ps and
// kin tree, and says so in kin show.
func TestUncheckedAgentIsMarked(t *testing.T) {
	a := kin.Agent{ID: 3, Name: "w", Status: kin.StatusActive, State: kin.StateActive, PID: 42, Command: []string{"sleep", "9"}, Reconciling: true}
	if got := stateString(&a); got != "active (unchecked)" {
		t.Errorf("stateString = %q", got)
	}
	var b strings.Builder
	if err := writeAgentTable(&b, []*kin.Agent{&a}); err != nil || !strings.Contains(b.String(), "active (unchecked)") {
		t.Errorf("kin ps row: %q, %v", b.String(), err)
	}
	rows := map[string]string{}
	writeRuntime(func(k, v string) { rows[k] = v }, &a)
	if !strings.Contains(rows["Process"], "not yet checked") {
		t.Errorf("kin show rows: %v", rows)
	}
	a.Reconciling = false
	rows = map[string]string{}
	writeRuntime(func(k, v string) { rows[k] = v }, &a)
	if _, ok := rows["Process"]; ok || stateString(&a) != "active" {
		t.Errorf("a checked agent is marked: %v, %q", rows, stateString(&a))
	}
}
