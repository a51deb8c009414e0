package cli

import (
	"reflect"
	"strings"
	"testing"

	"github.com/kin-agents/kin/kin"
)

func explainService() *fakeService {
	deny := kin.Decision{Allowed: false, Reason: "exec is denied by agent 3's policy", Rule: "deny exec", Source: kin.SourcePolicy, Agent: 3}
	return &fakeService{
		agents: map[kin.AgentID]*kin.Agent{7: {ID: 7, Name: "scout"}},
		explanation: &kin.Explanation{Decision: deny, Steps: []kin.Decision{
			{Allowed: true, Reason: "not on the global deny list", Source: kin.SourceGlobal},
			{Allowed: true, Reason: "the dev preset allows every tool", Rule: "allow *", Source: kin.SourcePreset, Agent: 3, Preset: "dev"},
			deny,
			{Allowed: true, Reason: "agent 7 has no tool rules of its own", Source: kin.SourcePolicy, Agent: 7},
		}},
	}
}

func TestExplain(t *testing.T) {
	svc := explainService()
	r := runFake(t, svc, "", "explain", "7", "--tool", "exec")
	wantOK(t, r)
	want := `denied: tool exec for agent 7: exec is denied by agent 3's policy (rule "deny exec", policy of agent 3)
  1. source=global agent=- preset=- allowed rule=- reason="not on the global deny list"
  2. source=preset agent=3 preset=dev allowed rule="allow *" reason="the dev preset allows every tool"
  3. source=policy agent=3 preset=- denied rule="deny exec" reason="exec is denied by agent 3's policy"
  4. source=policy agent=7 preset=- allowed rule=- reason="agent 7 has no tool rules of its own"
`
	if r.stdout != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", r.stdout, want)
	}

	// A path: its mode in the verdict.
	svc.explanation = &kin.Explanation{Mode: kin.ModeRO,
		Decision: kin.Decision{Allowed: true, Reason: "/work is read-only for agent 7", Rule: "/work ro", Source: kin.SourcePolicy, Agent: 7},
		Steps:    []kin.Decision{}}
	r = runFake(t, svc, "", "explain", "#7", "--path", "/work/src")
	wantOK(t, r)
	if want := "allowed: path /work/src for agent 7, mode ro: /work is read-only for agent 7 (rule \"/work ro\", policy of agent 7)\n"; r.stdout != want {
		t.Errorf("stdout %q, want %q", r.stdout, want)
	}

	r = runFake(t, svc, "", "explain", "7", "--path", "/work/src", "--json")
	wantOK(t, r)
	var e kin.Explanation
	decodeOne(t, r.stdout, &e)
	if e.Agent != 7 || e.Path != "/work/src" || e.Mode != kin.ModeRO || !e.Decision.Allowed || e.Decision.Rule != "/work ro" {
		t.Errorf("--json: %+v", e)
	}
	if want := []kin.ExplainRequest{{Agent: 7, Tool: "exec"}, {Agent: 7, Path: "/work/src"}, {Agent: 7, Path: "/work/src"}}; !reflect.DeepEqual(svc.explains, want) {
		t.Errorf("requests %+v, want %+v", svc.explains, want)
	}
}

func TestExplainErrors(t *testing.T) {
	svc := explainService()
	wantUsage(t, runFake(t, svc, "", "explain", "7"), "--tool NAME or --path PATH")
	wantUsage(t, runFake(t, svc, "", "explain", "7", "--tool", "exec", "--path", "/work"), "not both")
	wantUsage(t, runFake(t, svc, "", "explain", "7", "--tool", ""), "--tool needs a tool name")
	wantUsage(t, runFake(t, svc, "", "explain", "7", "--path", ""), "--path needs a path")
	wantUsage(t, runFake(t, svc, "", "explain", "--tool", "exec"), "one agent ID")
	wantError(t, runFake(t, svc, "", "explain", "abc", "--tool", "exec", "--json"), kin.ECodeInvalid)
	if len(svc.explains) != 0 {
		t.Errorf("bad command lines reached the service: %+v", svc.explains)
	}
	if msg := wantError(t, runFake(t, svc, "", "explain", "99", "--tool", "exec", "--json"), kin.ECodeNotFound); !strings.Contains(msg, "99") {
		t.Errorf("message %q", msg)
	}
}

// TestExplainKeepsLinesWhole: text from the daemon cannot break the one
// line per layer.
func TestExplainKeepsLinesWhole(t *testing.T) {
	svc := explainService()
	svc.explanation = &kin.Explanation{
		Decision: kin.Decision{Allowed: false, Reason: "two\nlines", Rule: "deny\rx", Source: kin.SourcePreset, Agent: 3, Preset: "a\nb"},
		Steps:    []kin.Decision{{Allowed: false, Reason: "x\ny", Preset: "p q"}},
	}
	r := runFake(t, svc, "", "explain", "7", "--tool", "exec")
	wantOK(t, r)
	if lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n"); len(lines) != 2 {
		t.Errorf("%d lines:\n%s", len(lines), r.stdout)
	}
}
