package policy

import (
	"reflect"
	"strings"
	"testing"

	"github.com/kin-agents/kin/kin"
)

func TestDefaultConfigIsSeed003(t *testing.T) {
	c := DefaultConfig()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	want := map[string]kin.ToolRules{
		"restricted": {Allow: []string{"read", "memory_search", "memory_get"}, Deny: []string{"exec", "write", "edit", "browser", "nodes", "gateway", "cron"}},
		"supervised": {Allow: []string{"read", "write", "edit", "memory_search", "memory_get", "web_search", "web_fetch", "exec"}, Deny: []string{"gateway", "cron", "nodes"}},
		"full":       {},
	}
	if !reflect.DeepEqual(c.Presets, want) || c.GlobalDeny != nil {
		t.Fatalf("DefaultConfig = %+v", c)
	}
}

// stageLayers is one agent at a stage under a global deny list.
func stageLayers(t *testing.T, globalDeny []string, stage string) []kin.PolicyLayer {
	t.Helper()
	r, err := DefaultConfig().Preset(stage)
	if err != nil {
		t.Fatal(err)
	}
	return Layers(globalDeny, []Link{{Agent: 4, Stage: stage, Preset: &r}})
}

func allowed(layers []kin.PolicyLayer, tool string) bool {
	d, _ := AllowTool(layers, tool)
	return d.Allowed
}

func TestPresetRestrictedBlocksExecWriteEdit(t *testing.T) {
	layers := stageLayers(t, nil, "restricted")
	for _, tool := range []string{"exec", "write", "edit", "browser", "web_fetch"} {
		if allowed(layers, tool) {
			t.Errorf("restricted allows %s", tool)
		}
	}
	for _, tool := range []string{"read", "memory_search", "memory_get"} {
		if !allowed(layers, tool) {
			t.Errorf("restricted denies %s", tool)
		}
	}
}

func TestPresetSupervisedAllowsExec(t *testing.T) {
	layers := stageLayers(t, nil, "supervised")
	for _, tool := range []string{"exec", "write", "edit", "web_fetch"} {
		if !allowed(layers, tool) {
			t.Errorf("supervised denies %s", tool)
		}
	}
	for _, tool := range []string{"gateway", "cron", "nodes", "browser"} {
		if allowed(layers, tool) {
			t.Errorf("supervised allows %s", tool)
		}
	}
}

func TestPresetFullHasNoRestrictions(t *testing.T) {
	layers := stageLayers(t, nil, "full")
	for _, tool := range []string{"exec", "gateway", "cron", "anything_at_all"} {
		if !allowed(layers, tool) {
			t.Errorf("full denies %s", tool)
		}
	}
}

// Seed 003: "a preset cannot grant tools that tools.deny blocks at the
// global level". The layers are ANDed, so no preset can.
func TestPresetCannotGrantWhatGlobalDenyBlocks(t *testing.T) {
	for _, stage := range []string{"restricted", "supervised", "full"} {
		layers := stageLayers(t, []string{"exec", "web_*"}, stage)
		for _, tool := range []string{"exec", "web_fetch", "web_search"} {
			d, _ := AllowTool(layers, tool)
			if d.Allowed {
				t.Errorf("stage %s grants %s over the global deny list", stage, tool)
			}
			if d.Source != kin.SourceGlobal {
				t.Errorf("stage %s, %s: decided by %q, want the global list", stage, tool, d.Source)
			}
		}
	}
}

func TestConfigPreset(t *testing.T) {
	c := DefaultConfig()
	r, err := c.Preset("restricted")
	if err != nil || r.Allow[0] != "read" {
		t.Fatalf("Preset(restricted) = %+v, %v", r, err)
	}
	r.Allow[0] = "exec" // a copy: the config is not changed
	if c.Presets["restricted"].Allow[0] != "read" {
		t.Error("Preset returned the config's own slice")
	}
	_, err = c.Preset("toddler")
	if err == nil || !strings.Contains(err.Error(), `stage "toddler" has no preset; the stages are: full, restricted, supervised`) {
		t.Errorf("Preset(toddler) = %v", err)
	}
}

func TestParseConfig(t *testing.T) {
	c, err := ParseConfig([]byte(`
global_deny: [gateway, "mcp__*"]
presets:
  newborn: {allow: [read]}
  full: {deny: [cron]}
`))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c.GlobalDeny, []string{"gateway", "mcp__*"}) {
		t.Errorf("GlobalDeny = %v", c.GlobalDeny)
	}
	if got := c.Presets["newborn"]; !reflect.DeepEqual(got, kin.ToolRules{Allow: []string{"read"}}) {
		t.Errorf("newborn = %+v", got)
	}
	if got := c.Presets["full"]; !reflect.DeepEqual(got, kin.ToolRules{Deny: []string{"cron"}}) {
		t.Errorf("full (overridden) = %+v", got)
	}
	if _, ok := c.Presets["supervised"]; !ok {
		t.Error("the shipped presets were dropped")
	}
	for in, want := range map[string]string{
		`{"global_deny": ["ok"], "preset": {}}`:               `unknown key "preset"`,
		`{"presets": {"x": {"allow": ["a b"]}}}`:              `presets.x.allow: "a b" has ' '`,
		`{"presets": {"bad stage": {}}}`:                      `presets: the stage name "bad stage"`,
		`{"global_deny": ["[x]"]}`:                            `global_deny: "[x]" has '['`,
		`{"presets": {"x": {"allow": ["a"], "sandbox": {}}}}`: `presets["x"]: unknown key "sandbox"`,
		``: "config is empty",
	} {
		if _, err := ParseConfig([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseConfig(%s) = %v, want %q", in, err, want)
		}
	}
}

func TestLayers(t *testing.T) {
	sup := DefaultConfig().Presets["supervised"]
	child := kin.Policy{Mounts: modes("/work", "ro")}
	got := Layers([]string{"gateway"}, []Link{
		{Agent: 1, Stage: "supervised", Preset: &sup},
		{Agent: 2, Policy: &child},
	})
	want := []kin.PolicyLayer{
		{Source: kin.SourceGlobal, Policy: kin.Policy{Tools: &kin.ToolRules{Deny: []string{"gateway"}}}},
		{Source: kin.SourcePreset, Agent: 1, Name: "supervised", Policy: kin.Policy{Tools: &sup}},
		{Source: kin.SourcePolicy, Agent: 2, Policy: child},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Layers =\n%+v\nwant\n%+v", got, want)
	}
	if got := Layers(nil, nil); got != nil {
		t.Errorf("Layers(nil, nil) = %+v", got)
	}
}
