package policy

import (
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/kin-agents/kin/kin"
)

func global(deny ...string) kin.PolicyLayer {
	return kin.PolicyLayer{Source: kin.SourceGlobal, Policy: kin.Policy{Tools: &kin.ToolRules{Deny: deny}}}
}

func preset(agent kin.AgentID, name string, r kin.ToolRules) kin.PolicyLayer {
	return kin.PolicyLayer{Source: kin.SourcePreset, Agent: agent, Name: name, Policy: kin.Policy{Tools: &r}}
}

func own(agent kin.AgentID, p kin.Policy) kin.PolicyLayer {
	return kin.PolicyLayer{Source: kin.SourcePolicy, Agent: agent, Policy: p}
}

func modes(kv ...string) map[string]kin.Mode {
	m := map[string]kin.Mode{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = kin.Mode(kv[i+1])
	}
	return m
}

func TestAllowTool(t *testing.T) {
	restricted := DefaultConfig().Presets["restricted"]
	layers := []kin.PolicyLayer{
		global("gateway"),
		preset(3, "restricted", restricted),
		own(3, kin.Policy{Tools: &kin.ToolRules{Deny: []string{"memory_*"}}}),
	}
	tests := []struct {
		tool    string
		allowed bool
		rule    string
		source  kin.PolicySource
		preset  string
		reason  string
	}{
		{"read", true, "", "", "", `tool "read" is allowed by the global deny list, the stage preset "restricted" of agent 3 and the policy of agent 3`},
		{"exec", false, "deny exec", kin.SourcePreset, "restricted", `tool "exec" is denied by the deny list of the stage preset "restricted" of agent 3 (exec)`},
		{"gateway", false, "deny gateway", kin.SourceGlobal, "", `tool "gateway" is denied by the global deny list (gateway)`},
		{"web_search", false, "not in allow [read memory_search memory_get]", kin.SourcePreset, "restricted",
			`tool "web_search" is not in the allow list [read memory_search memory_get] of the stage preset "restricted" of agent 3`},
		{"memory_get", false, "deny memory_*", kin.SourcePolicy, "", `tool "memory_get" is denied by the deny list of the policy of agent 3 (memory_*)`},
		{"", false, "", "", "", "a tool name is empty"},
	}
	for _, tt := range tests {
		d, steps := AllowTool(layers, tt.tool)
		if d.Allowed != tt.allowed || d.Rule != tt.rule || d.Source != tt.source || d.Preset != tt.preset || d.Reason != tt.reason {
			t.Errorf("AllowTool(%q) = %+v\nwant allowed=%v rule=%q source=%q preset=%q reason=%q", tt.tool, d, tt.allowed, tt.rule, tt.source, tt.preset, tt.reason)
		}
		if tt.tool != "" && len(steps) != len(layers) {
			t.Errorf("AllowTool(%q): %d steps for %d layers", tt.tool, len(steps), len(layers))
		}
	}
	// Each step is the layer's own verdict.
	_, steps := AllowTool(layers, "exec")
	if !steps[0].Allowed || steps[1].Allowed || !steps[2].Allowed {
		t.Errorf("steps for exec = %+v", steps)
	}
	if d, _ := AllowTool(nil, "exec"); !d.Allowed || !strings.Contains(d.Reason, "no layer restricts tools") {
		t.Errorf("AllowTool(no layers) = %+v", d)
	}
	if d, _ := AllowTool([]kin.PolicyLayer{own(1, kin.Policy{Tools: &kin.ToolRules{Allow: []string{}}})}, "read"); d.Allowed {
		t.Errorf("an empty allow list allowed read: %+v", d)
	}
}

func TestAllowEnv(t *testing.T) {
	layers := []kin.PolicyLayer{own(1, kin.Policy{Env: []string{"LC_*", "HOME"}}), own(2, kin.Policy{}), own(3, kin.Policy{Env: []string{"LC_ALL"}})}
	for _, tt := range []struct {
		name    string
		allowed bool
		agent   kin.AgentID
	}{
		{"LC_ALL", true, 0},
		{"HOME", false, 3},
		{"PATH", false, 1},
		{"", false, 0},
	} {
		d := AllowEnv(layers, tt.name)
		if d.Allowed != tt.allowed || d.Agent != tt.agent {
			t.Errorf("AllowEnv(%q) = %+v, want allowed=%v by agent %d", tt.name, d, tt.allowed, tt.agent)
		}
	}
	if d := AllowEnv([]kin.PolicyLayer{own(1, kin.Policy{})}, "ANY"); !d.Allowed {
		t.Errorf("a layer without env denied: %+v", d)
	}
}

func TestPathMode(t *testing.T) {
	layers := []kin.PolicyLayer{
		own(1, kin.Policy{Mounts: modes("/", "ro", "/work", "rw", "/tmp", "rw")}),
		own(2, kin.Policy{}), // lists no mounts: restricts nothing
		own(3, kin.Policy{Mounts: modes("/work", "rw", "/usr", "ro")}),
	}
	tests := []struct {
		path  string
		mode  kin.Mode
		agent kin.AgentID
		rule  string
	}{
		{"/work", kin.ModeRW, 1, "/work rw"},
		{"/work/a/b", kin.ModeRW, 1, "/work rw"},
		{"/usr/bin", kin.ModeRO, 1, "/ ro"},
		{"/tmp", kin.ModeHidden, 3, ""},
		{"/workx", kin.ModeHidden, 3, ""}, // "/work" is no prefix of "/workx"
		{"/", kin.ModeHidden, 3, ""},
		{"work", kin.ModeHidden, 0, ""},
		{"/work/../etc", kin.ModeHidden, 0, ""},
		{"/work/", kin.ModeHidden, 0, ""},
		{"", kin.ModeHidden, 0, ""},
	}
	for _, tt := range tests {
		m, d, _ := PathMode(layers, tt.path)
		if m != tt.mode || d.Agent != tt.agent || d.Rule != tt.rule || d.Allowed != (m != kin.ModeHidden) || d.Reason == "" {
			t.Errorf("PathMode(%q) = %s, %+v; want %s by agent %d rule %q", tt.path, m, d, tt.mode, tt.agent, tt.rule)
		}
	}
	if m, d, _ := PathMode(nil, "/etc"); m != kin.ModeRW || !d.Allowed {
		t.Errorf("PathMode(no layers) = %s, %+v", m, d)
	}
	_, d, _ := PathMode(layers, "/usr/bin")
	if want := `"/usr/bin" is read-only under the mount "/" ro of the policy of agent 1`; d.Reason != want {
		t.Errorf("reason = %q, want %q", d.Reason, want)
	}
}

func TestFlatten(t *testing.T) {
	layers := []kin.PolicyLayer{
		global("gateway"),
		own(1, kin.Policy{
			Mounts: modes("/", "ro", "/work", "rw"),
			Groups: []uint32{3, 1, 2},
			UID:    ptr(uint32(1000)),
			Detach: ptr(true),
			Spawn:  &kin.SpawnRules{Allow: ptr(true), Roles: []string{"b", "a"}},
			Budget: &kin.Budget{MaxTokens: ptr(int64(100)), CPUSeconds: ptr(int64(60)), Deadline: ptr(kin.Duration(600))},
			Env:    []string{"HOME"},
		}),
		own(2, kin.Policy{
			Mounts:     modes("/work", "rw", "/usr", "ro", "/work/a", "rw"),
			Groups:     []uint32{2, 3, 4},
			UID:        ptr(uint32(1001)),
			GID:        ptr(uint32(50)),
			Detach:     ptr(false),
			Spawn:      &kin.SpawnRules{Roles: []string{"a", "c"}},
			Budget:     &kin.Budget{MaxTokens: ptr(int64(500)), MemoryBytes: ptr(int64(1 << 20)), Deadline: ptr(kin.Duration(300))},
			Visibility: &kin.Visibility{ReadFrom: []string{"mano"}},
		}),
	}
	want := kin.Policy{
		Mounts:     modes("/work", "rw", "/usr", "ro"), // "/" hidden is implied; "/work/a" repeats "/work"
		Groups:     []uint32{2, 3},
		UID:        ptr(uint32(1001)),
		GID:        ptr(uint32(50)),
		Detach:     ptr(false),
		Spawn:      &kin.SpawnRules{Allow: ptr(true), Roles: []string{"a"}},
		Budget:     &kin.Budget{MaxTokens: ptr(int64(100)), CPUSeconds: ptr(int64(60)), MemoryBytes: ptr(int64(1 << 20)), Deadline: ptr(kin.Duration(300))},
		Visibility: &kin.Visibility{ReadFrom: []string{"mano"}},
	}
	if got := Flatten(layers); !reflect.DeepEqual(got, want) {
		t.Errorf("Flatten =\n%+v\nwant\n%+v", got, want)
	}
	if got := Flatten([]kin.PolicyLayer{global("exec")}); !reflect.DeepEqual(got, kin.Policy{}) {
		t.Errorf("Flatten(tools only) = %+v, want an unrestricted policy", got)
	}
	// Mounts that hide everything stay restricted: empty, not nil.
	if got := Flatten([]kin.PolicyLayer{own(1, kin.Policy{Mounts: modes("/a", "rw")}), own(2, kin.Policy{Mounts: modes("/b", "rw")})}); got.Mounts == nil || len(got.Mounts) != 0 {
		t.Errorf("Flatten(disjoint mounts).Mounts = %#v, want an empty map", got.Mounts)
	}
	// The agent's visibility is its own, never an ancestor's.
	if got := Flatten([]kin.PolicyLayer{own(1, kin.Policy{Visibility: &kin.Visibility{ReadFrom: []string{"x"}}}), preset(2, "full", kin.ToolRules{})}); got.Visibility != nil {
		t.Errorf("Flatten took an ancestor's visibility: %+v", got.Visibility)
	}
}

// Flatten's mounts give every path the same mode as the layers do, on
// random valid layer stacks and random paths.
func TestFlattenMountsMatchLayers(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	paths := []string{"/", "/a", "/a/b", "/a/b/c", "/a/c", "/b", "/b/a", "/ab", "/c"}
	for range 3000 {
		var layers []kin.PolicyLayer
		for i := range r.IntN(4) {
			layers = append(layers, own(kin.AgentID(i+1), kin.Policy{Mounts: randomMounts(r.IntN, paths[:7])}))
		}
		flat := Flatten(layers)
		if err := Validate(flat); err != nil {
			t.Fatalf("Flatten(%v) is not valid: %v", layers, err)
		}
		for _, p := range append(paths, "/a/b/c/d", "/z", "/b/aa") {
			want, _, _ := PathMode(layers, p)
			got, _, _ := PathMode([]kin.PolicyLayer{own(0, flat)}, p)
			if got != want {
				t.Fatalf("layers %v: PathMode(%q) = %s, flattened %v gives %s", layers, p, want, flat.Mounts, got)
			}
		}
		// Minimal: no entry repeats what its nearest ancestor gives.
		for p, m := range flat.Mounts {
			rest := maps2(flat.Mounts, p)
			if _, inherited, _ := lookup(rest, p); inherited == m {
				t.Fatalf("Flatten kept %q %s, which %v already implies", p, m, rest)
			}
		}
	}
}

func maps2(m map[string]kin.Mode, drop string) map[string]kin.Mode {
	out := map[string]kin.Mode{}
	for k, v := range m {
		if k != drop {
			out[k] = v
		}
	}
	return out
}

func TestLandlock(t *testing.T) {
	if rw, ro := Landlock(kin.Policy{}); rw != nil || ro != nil {
		t.Errorf("Landlock(unrestricted) = %v, %v; want nil, nil", rw, ro)
	}
	rw, ro := Landlock(kin.Policy{Mounts: modes("/work", "rw", "/usr", "ro", "/tmp", "rw", "/", "hidden", "/etc", "ro")})
	if !reflect.DeepEqual(rw, []string{"/tmp", "/work"}) || !reflect.DeepEqual(ro, []string{"/etc", "/usr"}) {
		t.Errorf("Landlock = %v, %v", rw, ro)
	}
	rw, ro = Landlock(kin.Policy{Mounts: map[string]kin.Mode{}})
	if rw == nil || ro == nil || len(rw)+len(ro) != 0 {
		t.Errorf("Landlock(everything hidden) = %#v, %#v; want two empty, non-nil lists", rw, ro)
	}
}
