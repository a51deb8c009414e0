package cli

import (
	"reflect"
	"strings"
	"testing"

	"github.com/kin-agents/kin/kin"
)

func TestPromote(t *testing.T) {
	svc := &fakeService{agents: map[kin.AgentID]*kin.Agent{7: {ID: 7, Name: "scout", Parent: 3, Status: kin.StatusActive, State: kin.StateActive, Life: kin.LifeOwned}}}
	r := runFake(t, svc, "", "promote", "7", "--stage", "prod")
	wantOK(t, r)
	for _, want := range []string{"Name            scout\n", "Stage           prod\n"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, r.stdout)
		}
	}
	r = runFake(t, svc, "", "promote", "#7", "--stage", "review", "--json")
	wantOK(t, r)
	var a kin.Agent
	decodeOne(t, r.stdout, &a)
	if a.ID != 7 || a.Stage != "review" {
		t.Errorf("--json: %+v", a)
	}
	if want := []kin.PromoteRequest{{Agent: 7, Stage: "prod"}, {Agent: 7, Stage: "review"}}; !reflect.DeepEqual(svc.promotes, want) {
		t.Errorf("requests %+v, want %+v", svc.promotes, want)
	}
}

func TestPromoteErrors(t *testing.T) {
	svc := &fakeService{agents: map[kin.AgentID]*kin.Agent{7: {ID: 7}}}
	wantUsage(t, runFake(t, svc, "", "promote", "7"), `"stage" not set`)
	wantUsage(t, runFake(t, svc, "", "promote", "7", "--stage", ""), "--stage needs a stage name")
	wantUsage(t, runFake(t, svc, "", "promote", "--stage", "prod"), "one agent ID")
	wantError(t, runFake(t, svc, "", "promote", "0", "--stage", "prod", "--json"), kin.ECodeInvalid)
	if len(svc.promotes) != 0 {
		t.Errorf("bad command lines reached the service: %+v", svc.promotes)
	}
	wantError(t, runFake(t, svc, "", "promote", "99", "--stage", "prod", "--json"), kin.ECodeNotFound)

	// An escalation's message names every item.
	svc.err = kin.Escalationf([]kin.Excess{{Field: "tools", Asked: "exec", Parent: "read"}},
		"stage %q gives more than agent 3 has:\n- tools: exec (agent 3 has read)", "prod")
	msg := wantError(t, runFake(t, svc, "", "promote", "7", "--stage", "prod", "--json"), kin.ECodeEscalation)
	if !strings.Contains(msg, "- tools: exec") {
		t.Errorf("message %q does not list the item", msg)
	}
	r := runFake(t, svc, "", "promote", "7", "--stage", "prod")
	if r.code != ExitError || !strings.HasSuffix(r.stderr, "(agent 3 has read) (permission_escalation)\n") {
		t.Errorf("exit %d, stderr %q", r.code, r.stderr)
	}
}
