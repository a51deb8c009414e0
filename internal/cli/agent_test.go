package cli

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/kin"
)

// asKinEnv makes the test binary act as the kin command: a spawned agent
// runs it to use kin as an agent would, through its KIN_SOCKET. (KIN_* names
// are kin's own and refused in --env.)
const asKinEnv = "CLITEST_AS_KIN"

func TestMain(m *testing.M) {
	if os.Getenv(asKinEnv) == "1" {
		os.Exit(Run(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	// The tests choose how to reach the daemon; a run inside an agent, or
	// with KIN_ADDR set, must not leak in.
	os.Unsetenv("KIN_SOCKET")
	os.Unsetenv("KIN_ADDR")
	code := m.Run()
	kintest.RemoveAgentBinary()
	os.Exit(code)
}

// kinAsAgent is the command line of an agent that runs `kin args...`.
// Agents run as their own uids, so the command is AgentBinary's copy of
// the test binary: `go test` keeps its own in a 0700 directory.
func kinAsAgent(args ...string) []string {
	bin, err := kintest.AgentBinaryPath()
	if err != nil {
		panic(err)
	}
	return append([]string{"--env", asKinEnv + "=1", "--", bin}, args...)
}

// spawnJSON runs `kin spawn --json args...` against d and returns the agent.
func spawnJSON(t *testing.T, d *kintest.Daemon, args ...string) *kin.Agent {
	t.Helper()
	r := kinAt(t, d, append([]string{"spawn", "--json"}, args...)...)
	wantOK(t, r)
	var a kin.Agent
	decodeOne(t, r.stdout, &a)
	if a.ID == 0 || a.PID == 0 || a.StartedAt.IsZero() {
		t.Fatalf("spawned agent %+v has no id, pid or start time", a)
	}
	return &a
}

// waitEnded waits until agent id's process has ended and been recorded.
func waitEnded(t *testing.T, d *kintest.Daemon, id kin.AgentID) *kin.Agent {
	t.Helper()
	var a *kin.Agent
	kintest.WaitFor(t, 30*time.Second, "agent "+id.String()+" to end", func() bool {
		var err error
		if a, err = d.Client.Agent(context.Background(), id); err != nil {
			t.Fatal(err)
		}
		return !a.EndedAt.IsZero() && a.State.Terminal()
	})
	return a
}

// logsOf is agent id's whole output, through `kin logs`.
func logsOf(t *testing.T, d *kintest.Daemon, id kin.AgentID) string {
	t.Helper()
	r := kinAt(t, d, "logs", id.String())
	wantOK(t, r)
	return r.stdout
}
