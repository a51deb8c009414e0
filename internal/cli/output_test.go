package cli

import (
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
