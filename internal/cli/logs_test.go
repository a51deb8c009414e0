package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/kin"
)

func TestLogs(t *testing.T) {
	d := kintest.StartDaemon(t)
	a := spawnJSON(t, d, "--responsible", "ops", "sh", "-c", "echo one; echo two >&2; printf 'no newline'")
	waitEnded(t, d, a.ID)
	if got := logsOf(t, d, a.ID); got != "one\ntwo\nno newline" {
		t.Errorf("logs %q", got)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--offset", "4"}, "two\nno newline"},
		{[]string{"--offset", "1000"}, ""},
		{[]string{"--follow"}, "one\ntwo\nno newline"}, // the agent has ended: follow ends at once
		{[]string{"--json"}, "one\ntwo\nno newline"},
	} {
		r := kinAt(t, d, append([]string{"logs", a.ID.String()}, c.args...)...)
		wantOK(t, r)
		if r.stdout != c.want {
			t.Errorf("logs %v = %q, want %q", c.args, r.stdout, c.want)
		}
	}
}

// TestLogsFollow follows a running agent: output arrives as it is written,
// and the command ends once the agent has.
func TestLogsFollow(t *testing.T) {
	d := kintest.StartDaemon(t)
	gate := filepath.Join(kintest.SharedDir(t), "gate") // the agent runs as another uid
	// The agent waits for the test to open the gate: no sleeps in the test.
	a := spawnJSON(t, d, "--responsible", "ops", "sh", "-c", `echo start; while [ ! -e "$1" ]; do sleep 0.01; done; echo end`, "sh", gate)

	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- Env{Stdout: &out, Stderr: &errb}.Run(context.Background(), []string{"--home", d.Home, "logs", a.ID.String(), "--follow"})
	}()
	kintest.WaitFor(t, 30*time.Second, "the first line", func() bool { return out.String() == "start\n" })
	select {
	case code := <-done:
		t.Fatalf("logs --follow ended (exit %d) while the agent runs", code)
	default:
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != 0 || out.String() != "start\nend\n" || errb.String() != "" {
			t.Fatalf("exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("logs --follow did not end after the agent did")
	}
}

// TestLogsFollowInterrupted: Ctrl-C is the normal way to stop following.
func TestLogsFollowInterrupted(t *testing.T) {
	d := kintest.StartDaemon(t)
	a := spawnJSON(t, d, "--responsible", "ops", "sh", "-c", "echo running; exec sleep 600")
	var out, errb syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- Env{Stdout: &out, Stderr: &errb}.Run(ctx, []string{"--home", d.Home, "logs", a.ID.String(), "-f"})
	}()
	kintest.WaitFor(t, 30*time.Second, "the output", func() bool { return out.String() == "running\n" })
	cancel()
	select {
	case code := <-done:
		if code != 0 || errb.String() != "" {
			t.Fatalf("exit %d, stderr %q", code, errb.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("logs --follow did not return when interrupted")
	}
}

func TestLogsErrors(t *testing.T) {
	d := kintest.StartDaemon(t)
	seedLineage(t, d)
	msg := wantError(t, kinAt(t, d, "logs", "1", "--json"), kin.ECodeInvalid) // registered, never spawned
	if !strings.Contains(msg, "without a process") {
		t.Errorf("message %q", msg)
	}
	wantError(t, kinAt(t, d, "logs", "99", "--json"), kin.ECodeNotFound)
	wantError(t, kinAt(t, d, "logs", "abc", "--json"), kin.ECodeInvalid)
	wantUsage(t, kinAt(t, d, "logs"), "one agent ID")
	wantUsage(t, kinAt(t, d, "logs", "1", "--offset", "-1"), "--offset")
	wantUsage(t, kinAt(t, d, "logs", "1", "--bogus"), "--bogus")
}
