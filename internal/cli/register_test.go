package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/kin-agents/kin/internal/governor"
	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/kin"
)

// detachProfile writes the default profile with allow_detach granted: no
// shipped profile grants it (seed 001: detached needs an explicit grant).
func detachProfile(t *testing.T) string {
	t.Helper()
	p, _, err := governor.Load("default")
	if err != nil {
		t.Fatal(err)
	}
	p.Name, p.AllowDetach = "detach", true
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "detach.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestRegister(t *testing.T) {
	d := kintest.StartDaemon(t, kintest.WithProfile(detachProfile(t)))
	r := kinAt(t, d, "register", "--name", "Research-Coordinator", "--responsible", "Dr. Schmidt, COAI Research",
		"--role", "coordinator", "--scope", "research", "--wallet", "0x4b19", "--constitution", "sha256:c0", "--capability", "sha256:ca",
		"--self-modifying")
	wantOK(t, r)
	for _, want := range []string{"ID", "Research-Coordinator", "coordinator", "Dr. Schmidt, COAI Research", "Generation      0", "0x4b19", "sha256:c0", "sha256:ca", "Self-modifying  yes"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, r.stdout)
		}
	}

	r = kinAt(t, d, "register", "--name", "Data-Collector", "--parent", "1", "--life", "detached", "--json")
	wantOK(t, r)
	var child kin.Agent
	decodeOne(t, r.stdout, &child)
	if child.ID != 2 || child.Parent != 1 || child.Generation != 1 || child.Life != kin.LifeDetached ||
		child.Responsible != "Dr. Schmidt, COAI Research" || child.Status != kin.StatusActive {
		t.Errorf("child = %+v", child)
	}

	// "#1" is accepted as in seed 000's "Agent #1".
	wantOK(t, kinAt(t, d, "register", "--name", "Report-Writer", "--parent", "#1", "--json"))
}

func TestRegisterErrors(t *testing.T) {
	d := kintest.StartDaemon(t)
	wantOK(t, kinAt(t, d, "register", "--name", "root", "--responsible", "ops", "--json"))
	// The default profile does not grant detached children.
	wantError(t, kinAt(t, d, "register", "--name", "loose", "--parent", "1", "--life", "detached", "--json"), kin.ECodeSpawnNotAllowed)
	before := lastEvent(t, d)

	wantUsage(t, kinAt(t, d, "register", "--responsible", "ops"), `"name"`)
	wantUsage(t, kinAt(t, d, "register", "--name", "x", "--parent", "abc"), "--parent")
	wantUsage(t, kinAt(t, d, "register", "--name", "x", "--parent", "-1"), "--parent")
	wantUsage(t, kinAt(t, d, "register", "--name", "x", "--responsible", "ops", "--life", "forever"), "--life", "owned, detached")
	wantUsage(t, kinAt(t, d, "register", "--name", "x", "--responsible", "ops", "--bogus"), "--bogus")
	wantUsage(t, kinAt(t, d, "register", "extra", "--name", "x", "--responsible", "ops"), "extra")

	wantError(t, kinAt(t, d, "register", "--name", "x", "--parent", "99", "--json"), kin.ECodeParentNotFound)
	wantError(t, kinAt(t, d, "register", "--name", "root", "--responsible", "ops", "--json"), kin.ECodeConflict)
	msg := wantError(t, kinAt(t, d, "register", "--name", "bad/name", "--responsible", "ops", "--json"), kin.ECodeInvalid)
	if !strings.Contains(msg, "bad/name") {
		t.Errorf("message %q does not name the name", msg)
	}

	r := kinAt(t, d, "register", "--name", "x", "--parent", "99")
	if r.code != ExitError || !strings.HasPrefix(r.stderr, "kin: ") || !strings.HasSuffix(r.stderr, "(parent_not_found)\n") {
		t.Errorf("exit %d, stderr %q", r.code, r.stderr)
	}

	// Only the rejected spawn under a missing parent is recorded (seed 002's
	// alert); nothing else was written.
	evs, err := d.Client.Events(t.Context(), kin.EventFilter{Since: before})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if e.Type != kin.EventSpawnRejected {
			t.Errorf("unexpected event %s", e.Type)
		}
	}
}

func TestRegisterGovernorRefusal(t *testing.T) {
	d := kintest.StartDaemon(t, kintest.WithProfile("aauth"))
	wantOK(t, kinAt(t, d, "register", "--name", "top", "--responsible", "ops", "--json"))
	wantOK(t, kinAt(t, d, "register", "--name", "sub", "--parent", "1", "--json"))
	wantError(t, kinAt(t, d, "register", "--name", "subsub", "--parent", "2", "--json"), kin.ECodeSpawnDepth)
}

// TestRegisterPolicy: kin register takes --policy and --stage as kin spawn
// does; an escalation is reported with every item.
func TestRegisterPolicy(t *testing.T) {
	dir := writeFiles(t, "policy.yaml", policyYAML, "bad.yaml", "tools: [read]\n")
	svc := &fakeService{}
	r := runFake(t, svc, "", "register", "--name", "scout", "--parent", "3", "--policy", filepath.Join(dir, "policy.yaml"), "--stage", "dev")
	wantOK(t, r)
	if !strings.Contains(r.stdout, "Stage           dev\n") {
		t.Errorf("output lacks the stage:\n%s", r.stdout)
	}
	want := kin.RegisterRequest{Name: "scout", Parent: 3, Stage: "dev",
		Policy: &kin.Policy{Tools: &kin.ToolRules{Deny: []string{"web_*"}}, Budget: &kin.Budget{MaxTokens: ptr(int64(5000))}}}
	if len(svc.registers) != 1 || !reflect.DeepEqual(svc.registers[0], want) {
		t.Errorf("registers %+v, want %+v", svc.registers, want)
	}
	// Without the flags, neither is sent.
	wantOK(t, runFake(t, svc, "", "register", "--name", "plain", "--parent", "3", "--json"))
	if got := svc.registers[1]; got.Policy != nil || got.Stage != "" || got.Template != nil {
		t.Errorf("register without --policy: %+v", got)
	}

	msg := wantError(t, runFake(t, svc, "", "register", "--name", "x", "--parent", "3", "--policy", filepath.Join(dir, "bad.yaml"), "--json"), kin.ECodeInvalid)
	if !strings.Contains(msg, "--policy "+filepath.Join(dir, "bad.yaml")) || !strings.Contains(msg, "tools") {
		t.Errorf("message %q", msg)
	}
	wantUsage(t, runFake(t, svc, "", "register", "--name", "x", "--parent", "3", "--template", dir), "unknown flag: --template")
	if len(svc.registers) != 2 {
		t.Errorf("bad command lines reached the service: %+v", svc.registers[2:])
	}

	svc.err = kin.Escalationf([]kin.Excess{{Field: "budget.max_tokens", Asked: "5000", Parent: "1000"}},
		"the request asks for more than agent 3 has:\n- budget.max_tokens: 5000 (agent 3 has 1000)")
	msg = wantError(t, runFake(t, svc, "", "register", "--name", "y", "--parent", "3", "--policy", filepath.Join(dir, "policy.yaml"), "--json"), kin.ECodeEscalation)
	if !strings.Contains(msg, "budget.max_tokens: 5000 (agent 3 has 1000)") {
		t.Errorf("message %q", msg)
	}
}
