package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/kin-agents/kin/kin"
)

func TestContextPack(t *testing.T) {
	text := "# Context pack: 1 child\n\n## Child rev-123\n\nstatus: completed\n"
	svc := &fakeService{packs: map[kin.AgentID]*kin.ContextPack{
		7: {Agent: 7, Text: text, Children: json.RawMessage(`[{"name":"rev-123","status":"completed","result":"","refs":[],"artifacts":[]}]`)},
	}}
	r := runFake(t, svc, "", "context", "pack", "7")
	wantOK(t, r)
	if r.stdout != text {
		t.Errorf("stdout %q, want the pack's text", r.stdout)
	}

	r = runFake(t, svc, "", "context", "pack", "#7", "--json")
	wantOK(t, r)
	var p struct {
		Agent    kin.AgentID `json:"agent"`
		Text     string      `json:"text"`
		Children []struct {
			Name   string `json:"name"`
			Status string `json:"status"`
		} `json:"children"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &p); err != nil {
		t.Fatalf("%v in %s", err, r.stdout)
	}
	if p.Agent != 7 || p.Text != text || len(p.Children) != 1 || p.Children[0].Name != "rev-123" {
		t.Errorf("--json printed %+v", p)
	}

	// Without ID: the calling agent's own.
	svc.whoami = &kin.Agent{ID: 7, Name: "lead"}
	r = runFake(t, svc, "", "context", "pack")
	wantOK(t, r)
	if r.stdout != text {
		t.Errorf("inside agent 7: stdout %q", r.stdout)
	}
}

func TestContextPackErrors(t *testing.T) {
	svc := &fakeService{} // the operator
	msg := wantError(t, runFake(t, svc, "", "context", "pack", "--json"), kin.ECodeInvalid)
	if !strings.Contains(msg, "name an agent: the operator has no context") {
		t.Errorf("message %q", msg)
	}
	wantError(t, runFake(t, svc, "", "context", "pack", "99", "--json"), kin.ECodeNotFound)
	wantError(t, runFake(t, svc, "", "context", "pack", "0", "--json"), kin.ECodeInvalid)
	wantUsage(t, runFake(t, svc, "", "context", "pack", "1", "2"), "at most one agent ID")

	// "kin context" alone is its help.
	r := runFake(t, svc, "", "context")
	wantOK(t, r)
	if !strings.Contains(r.stdout, "pack") || !strings.Contains(r.stdout, "context/child/<child>/") {
		t.Errorf("kin context:\n%s", r.stdout)
	}
}
