package cli

import (
	"strings"
	"testing"

	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/kin"
)

func TestWhoamiOperator(t *testing.T) {
	d := kintest.StartDaemon(t)
	r := kinAt(t, d, "whoami")
	wantOK(t, r)
	if r.stdout != "operator\n" {
		t.Errorf("stdout %q", r.stdout)
	}
	r = kinAt(t, d, "whoami", "--json")
	wantOK(t, r)
	if strings.TrimSpace(r.stdout) != "null" {
		t.Errorf("stdout %q, want null", r.stdout)
	}
	wantUsage(t, kinAt(t, d, "whoami", "extra"), "extra")
}

// TestInsideAnAgent runs kin as an agent would: the process kin spawned
// reaches the daemon through its KIN_SOCKET, as itself; under either
// containment.
func TestInsideAnAgent(t *testing.T) {
	for _, containment := range []string{"auto", "process-groups"} {
		t.Run(containment, func(t *testing.T) {
			var opts []kintest.Option
			if containment != "auto" {
				opts = append(opts, kintest.WithContainment(containment))
			}
			insideAnAgent(t, kintest.StartDaemon(t, opts...))
		})
	}
}

func insideAnAgent(t *testing.T, d *kintest.Daemon) {
	boss := spawnJSON(t, d, "--name", "boss", "--responsible", "ops", "sleep", "600")
	outsider := spawnJSON(t, d, "--name", "outsider", "--responsible", "ops", "sleep", "600")
	agent := func(name string, args ...string) (*kin.Agent, string) {
		t.Helper()
		a := spawnJSON(t, d, append([]string{"--name", name, "--parent", boss.ID.String()}, kinAsAgent(args...)...)...)
		a = waitEnded(t, d, a.ID)
		return a, logsOf(t, d, a.ID)
	}

	a, out := agent("who", "whoami", "--json")
	var me kin.Agent
	decodeOne(t, out, &me)
	if me.ID != a.ID || me.Name != "who" || me.Parent != boss.ID {
		t.Errorf("whoami inside agent %d said %+v", a.ID, me)
	}
	if a.Exit == nil || a.Exit.Code != 0 {
		t.Errorf("exit %v", a.Exit)
	}

	a, out = agent("beater", "heartbeat", "--cursor", "step-3")
	if !strings.Contains(out, "#"+a.ID.String()+" beater") || a.Cursor != "step-3" || a.LastHeartbeat.IsZero() {
		t.Errorf("heartbeat inside agent %d: output %q, agent %+v", a.ID, out, a)
	}

	// Spawning from inside: without --parent the child is the caller's.
	a, out = agent("spawner", "spawn", "--json", "--name", "grandchild", "--", "true")
	var child kin.Agent
	decodeOne(t, out, &child)
	if child.Parent != a.ID || child.CreatedBy != kin.AgentCreatedBy(a.ID) || child.Generation != 2 {
		t.Errorf("a child spawned inside agent %d: %+v", a.ID, child)
	}

	// Outside its own subtree an agent is forbidden.
	a, out = agent("meddler", "stop", outsider.ID.String(), "--json")
	var e kin.Error
	decodeOne(t, out, &e)
	if e.Code != kin.ECodeForbidden || a.Exit == nil || a.Exit.Code != ExitError {
		t.Errorf("stop of an outsider from inside agent %d: %+v, exit %v", a.ID, e, a.Exit)
	}
}
