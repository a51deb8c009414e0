package agentreq

import (
	"errors"
	"strings"
	"testing"

	"github.com/kin-agents/kin/kin"
)

func TestResolveCommand(t *testing.T) {
	look := func(name string) (string, error) {
		switch name {
		case "agent":
			return "/opt/bin/agent", nil
		case "rel":
			return "bin/rel", nil
		}
		return "", errors.New("not found")
	}
	for in, want := range map[string]string{"agent": "/opt/bin/agent", "rel": "rel", "missing": "missing", "./x": "./x", "": ""} {
		if got := ResolveCommand(in, look); got != want {
			t.Errorf("ResolveCommand(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestHandoffLabels: each caller's errors name its own inputs.
func TestHandoffLabels(t *testing.T) {
	for _, c := range []struct {
		h    Handoff
		want string
	}{
		{Handoff{Task: "", TaskLabel: "handoff"}, "handoff: "},
		{Handoff{Task: "Do it.", Refs: []string{"/no/such/ref"}, RefsLabel: "--ref"}, "--ref: "},
		{Handoff{Task: "Do it.", Contract: []byte(`{"bogus": 1}`), ContractLabel: "contract"}, "contract: "},
	} {
		_, err := c.h.Build()
		if kin.ErrorCodeOf(err) != kin.ECodeInvalid || !strings.HasPrefix(kin.ErrorMessageOf(err), c.want) {
			t.Errorf("%+v: %v, want invalid starting %q", c.h, err, c.want)
		}
	}
	ho, err := Handoff{Task: "Do it.", Contract: []byte("  {\"sections\": [{\"name\": \"Summary\"}]}\n")}.Build()
	if err != nil || string(ho.Contract) != `{"sections": [{"name": "Summary"}]}` {
		t.Errorf("contract sent as %q (%v), want it as written, trimmed", ho.Contract, err)
	}
}
