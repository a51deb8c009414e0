package cli

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/kin-agents/kin/kin"
)

func TestCreate(t *testing.T) {
	tpl := writeTemplate(t, fragmentJSON)
	dir := writeFiles(t, "policy.yaml", policyYAML)
	svc := &fakeService{}
	r := runFake(t, svc, "", "create", "writer-2", "--from-template", tpl, "--parent", "3", "--set", "TOPIC=lineage",
		"--policy", filepath.Join(dir, "policy.yaml"))
	wantOK(t, r)
	for _, want := range []string{"Name            writer-2\n", "Role            writer\n", "Stage           dev\n"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, r.stdout)
		}
	}
	want := kin.RegisterRequest{
		Name: "writer-2", Role: "writer", Parent: 3, Stage: "dev",
		Policy: &kin.Policy{
			Tools:  &kin.ToolRules{Allow: []string{"read", "edit"}, Deny: []string{"web_*"}},
			Mounts: map[string]kin.Mode{"/work": kin.ModeRO},
			Budget: &kin.Budget{MaxTokens: ptr(int64(5000))},
		},
		Template: &kin.Template{Files: templateFiles(), Vars: map[string]string{"TOPIC": "lineage"}},
	}
	if len(svc.registers) != 1 || !reflect.DeepEqual(svc.registers[0], want) {
		t.Errorf("registers %+v\nwant %+v", svc.registers, want)
	}

	// A root with a responsible party, flags over the fragment, --json;
	// a template without a fragment.
	plain := writeTemplate(t, "")
	r = runFake(t, svc, "", "create", "auditor", "--from-template", plain, "--responsible", "Dr. Schmidt", "--role", "auditor", "--stage", "review", "--json")
	wantOK(t, r)
	var a kin.Agent
	decodeOne(t, r.stdout, &a)
	got := svc.registers[1]
	if a.Name != "auditor" || got.Responsible != "Dr. Schmidt" || got.Role != "auditor" || got.Stage != "review" || got.Policy != nil || got.Template == nil || got.Template.Vars != nil {
		t.Errorf("create auditor: agent %+v, request %+v", a, got)
	}
}

func TestCreateErrors(t *testing.T) {
	tpl := writeTemplate(t, fragmentJSON)
	svc := &fakeService{}
	wantUsage(t, runFake(t, svc, "", "create", "w", "--parent", "3"), `"from-template" not set`)
	wantUsage(t, runFake(t, svc, "", "create", "--from-template", tpl, "--parent", "3"), "one NAME")
	wantUsage(t, runFake(t, svc, "", "create", "a", "b", "--from-template", tpl, "--parent", "3"), "one NAME")
	wantUsage(t, runFake(t, svc, "", "create", "w", "--from-template", tpl, "--parent", "3", "--set", "lower=x"), "--set")
	wantUsage(t, runFake(t, svc, "", "create", "w", "--from-template", tpl, "--parent", "x"), "--parent")
	msg := wantError(t, runFake(t, svc, "", "create", "w", "--from-template", filepath.Join(tpl, "missing"), "--parent", "3", "--json"), kin.ECodeInvalid)
	if !strings.Contains(msg, "--from-template "+filepath.Join(tpl, "missing")) {
		t.Errorf("message %q does not name the directory", msg)
	}
	if len(svc.registers) != 0 {
		t.Errorf("bad command lines reached the service: %+v", svc.registers)
	}
	// A root without --responsible is no longer a usage error: the daemon
	// names the operator (TestSpawnWithNoFlags).
	runFake(t, svc, "", "create", "w", "--from-template", tpl)
	if len(svc.registers) != 1 || svc.registers[0].Responsible != "" {
		t.Errorf("create without --responsible sent %+v, want one request without it", svc.registers)
	}
	// The daemon's refusal of a placeholder without a value, as it comes.
	svc.err = kin.Errorf(kin.ECodeInvalid, "template: SOUL.md uses {TOPIC}, which has no value (give --set TOPIC=...)")
	if msg := wantError(t, runFake(t, svc, "", "create", "w", "--from-template", tpl, "--parent", "3", "--json"), kin.ECodeInvalid); !strings.Contains(msg, "{TOPIC}") {
		t.Errorf("message %q", msg)
	}
}
