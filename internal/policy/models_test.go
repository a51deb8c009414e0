package policy

import (
	"math"
	"strings"
	"testing"

	"github.com/kin-agents/kin/kin"
)

// TestModelsAttenuate: a child's models lists fit within every parent
// layer's, exactly as tools do; a child that names none keeps its parent's.
func TestModelsAttenuate(t *testing.T) {
	parent := []kin.PolicyLayer{own(1, kin.Policy{Models: &kin.ToolRules{Allow: []string{"gpt-*", "claude-3-5-*"}, Deny: []string{"gpt-4.5*"}}})}
	for _, c := range []struct {
		child *kin.ToolRules
		want  bool // exceeds
	}{
		{nil, false},
		{&kin.ToolRules{Allow: []string{"gpt-4o-mini"}}, false},
		{&kin.ToolRules{Allow: []string{"gpt-*"}, Deny: []string{"gpt-4.5*"}}, false},
		{&kin.ToolRules{Allow: []string{"gpt-*"}}, true}, // gpt-4.5 too
		{&kin.ToolRules{Allow: []string{"claude-*"}}, true},
		{&kin.ToolRules{}, true}, // nil allow: every model
		{&kin.ToolRules{Allow: []string{}}, false},
	} {
		ex := Exceeds(parent, Remaining{}, now, kin.Policy{Models: c.child}, nil)
		if (len(ex) > 0) != c.want {
			t.Errorf("child %+v: excess %+v", c.child, ex)
		}
		for _, e := range ex {
			if e.Field != "models" || !strings.Contains(e.Parent, "agent 1") {
				t.Errorf("child %+v: excess %+v", c.child, e)
			}
		}
	}
	// Under the operator (no layers) anything goes.
	if ex := Exceeds(nil, Remaining{}, now, kin.Policy{Models: &kin.ToolRules{}}, nil); ex != nil {
		t.Errorf("under the operator: %+v", ex)
	}
}

func TestAllowModel(t *testing.T) {
	layers := []kin.PolicyLayer{
		own(1, kin.Policy{Models: &kin.ToolRules{Allow: []string{"gpt-*", "claude-*"}}}),
		own(2, kin.Policy{Models: &kin.ToolRules{Deny: []string{"claude-3-opus*"}}}),
		own(3, kin.Policy{}),
	}
	for model, want := range map[string]bool{"gpt-4o": true, "claude-3-5-haiku": true, "claude-3-opus-latest": false, "llama-3": false, "": false,
		"Claude-3-Opus-latest": false, "CLAUDE-3-OPUS": false, "GPT-4o": false} {
		d := AllowModel(layers, model)
		if d.Allowed != want || d.Reason == "" {
			t.Errorf("AllowModel(%q) = %+v", model, d)
		}
		if !want && model != "" && d.Agent == 0 {
			t.Errorf("AllowModel(%q) names no layer: %+v", model, d)
		}
	}
	// A deny list alone binds whatever the case (an upstream may not
	// care); an allow list matches as written.
	denyOnly := []kin.PolicyLayer{own(1, kin.Policy{Models: &kin.ToolRules{Deny: []string{"gpt-4o*"}}})}
	for model, want := range map[string]bool{"GPT-4o": false, "Gpt-4O-mini": false, "gpt-4o": false, "gpt-5": true} {
		if d := AllowModel(denyOnly, model); d.Allowed != want {
			t.Errorf("deny list alone: AllowModel(%q) = %+v", model, d)
		}
	}
	if d := AllowModel(nil, "anything"); !d.Allowed {
		t.Errorf("no layers: %+v", d)
	}
}

func TestPrices(t *testing.T) {
	c, err := ParseConfig([]byte(`{"prices": {"gpt-4o-mini": {"input": 0.15, "output": 0.6, "cached_input": 0.075}, "gpt-4o*": {"input": 2.5, "output": 10}, "*": {"input": 1, "output": 1}}}`))
	if err != nil {
		t.Fatal(err)
	}
	for model, want := range map[string]float64{"gpt-4o-mini": 0.15, "gpt-4o-2024": 2.5, "other": 1} {
		if p, ok := c.Price(model); !ok || p.Input != want {
			t.Errorf("Price(%q) = %+v, %v", model, p, ok)
		}
	}
	p, _ := c.Price("gpt-4o-mini")
	if got, want := p.Cost(1_000_000, 400_000, 100_000), 0.6*0.15+0.4*0.075+0.1*0.6; math.Abs(got-want) > 1e-12 {
		t.Errorf("cost %v, want %v", got, want)
	}
	if _, ok := DefaultConfig().Price("gpt-4o"); ok {
		t.Error("the default config prices a model")
	}
	for _, bad := range []string{`{"prices": {"m": {"input": -1, "output": 1}}}`, `{"prices": {"m": {"input": 1, "output": 1e9}}}`,
		`{"prices": {"m": {"input": 1, "output": 1, "extra": 2}}}`, `{"prices": {"": {"input": 1, "output": 1}}}`, `{"prices": {"m": {"input": "x"}}}`} {
		if _, err := ParseConfig([]byte(bad)); err == nil {
			t.Errorf("ParseConfig(%s) took it", bad)
		}
	}
}
