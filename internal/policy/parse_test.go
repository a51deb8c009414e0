package policy

import (
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kin-agents/kin/kin"
)

func TestParseJSONAndYAML(t *testing.T) {
	want := kin.Policy{
		Tools:      &kin.ToolRules{Allow: []string{"read", "web_*"}, Deny: []string{"web_post"}},
		Mounts:     map[string]kin.Mode{"/": kin.ModeHidden, "/work": kin.ModeRW, "/usr": kin.ModeRO},
		Groups:     []uint32{100},
		Env:        []string{"HOME", "LC_*"},
		Spawn:      &kin.SpawnRules{Allow: ptr(true), Roles: []string{"coder"}},
		Budget:     &kin.Budget{Deadline: ptr(kin.Duration(90 * time.Minute)), MaxTokens: ptr(int64(100000)), MaxCost: ptr(2.5)},
		Visibility: &kin.Visibility{ReadFrom: []string{"mano", "7"}, Scope: []string{"memory/**", "SOUL.md"}},
	}
	jsonIn := `{
		"tools": {"allow": ["read", "web_*"], "deny": ["web_post"]},
		"mounts": {"/": "hidden", "/work": "rw", "/usr": "ro"},
		"groups": [100],
		"env": ["HOME", "LC_*"],
		"spawn": {"allow": true, "roles": ["coder"]},
		"budget": {"deadline": "1h30m", "max_tokens": 100000, "max_cost": 2.5},
		"visibility": {"read_from": ["mano", "7"], "scope": ["memory/**", "SOUL.md"]}
	}`
	yamlIn := `
# a spawner's policy
tools:
  allow: [read, "web_*"]
  deny: [web_post]
mounts:
  /: hidden
  /work: rw
  /usr: ro
groups: [100]
env: [HOME, "LC_*"]
spawn: {allow: true, roles: [coder]}
budget:
  deadline: 1h30m
  max_tokens: 100000
  max_cost: 2.5
visibility:
  read_from: [mano, "7"]
  scope: ["memory/**", SOUL.md]
`
	for name, in := range map[string]string{"json": jsonIn, "yaml": yamlIn} {
		got, err := Parse([]byte(in))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: got %+v, want %+v", name, got, want)
		}
	}
}

// An empty list is present and restricts to nothing; it must not read as
// absent (which restricts nothing at all).
func TestParseKeepsEmptyApartFromAbsent(t *testing.T) {
	p, err := Parse([]byte(`{"tools": {"allow": []}, "mounts": {}, "groups": [], "env": [], "spawn": {"roles": []}}`))
	if err != nil {
		t.Fatal(err)
	}
	if p.Tools.Allow == nil || p.Mounts == nil || p.Groups == nil || p.Env == nil || p.Spawn.Roles == nil {
		t.Fatalf("an empty list became nil: %+v", p)
	}
	empty, err := Parse([]byte(`{}`))
	if err != nil || !reflect.DeepEqual(empty, kin.Policy{}) {
		t.Fatalf("Parse({}) = %+v, %v", empty, err)
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"empty", ``, "policy is empty"},
		{"blank", "  \n\t", "policy is empty"},
		{"null", `null`, "policy is empty"},
		{"too big", `{"env": ["` + strings.Repeat("A", MaxPolicyBytes) + `"]}`, "at most 262144 are allowed"},
		{"not a mapping", `["read"]`, "must be a mapping"},
		{"unknown key", `{"tools": {}, "mount": {}}`, `unknown key "mount"`},
		{"unknown nested key", `{"tools": {"alow": ["read"]}}`, `tools: unknown key "alow"`},
		{"unknown yaml key", "budget:\n  max_token: 5\n", `budget: unknown key "max_token"`},
		{"keys are case-sensitive", `{"Tools": {}}`, `unknown key "Tools"`},
		{"repeated json key", `{"env": ["A"], "env": ["B"]}`, `the key "env" appears twice`},
		{"repeated yaml key", "env: [A]\nenv: [B]\n", `"env" already set`},
		{"trailing json", `{} {"env": ["A"]}`, "more after the first object"},
		{"two yaml documents", "env: [A]\n---\nenv: [B]\n", "more than one YAML document"},
		{"invalid json", `{"env": [}`, "not valid JSON"},
		{"invalid yaml", "env: [A\n", "not valid YAML"},
		{"wrong type", `{"groups": ["wheel"]}`, `groups[0]: the string "wheel" is not a whole number`},
		{"yaml boolean", "env: [on]\n", "quote them"},
		{"null entry", `{"env": [null]}`, "env[0] is null"},
		{"negative group", `{"groups": [-1]}`, "groups[0]: the number -1"},
		{"duration as number", `{"budget": {"deadline": 60}}`, `budget.deadline: the number 60 is not a duration`},
		{"bad duration", `{"budget": {"deadline": "soon"}}`, `budget.deadline: "soon" is not a duration`},
		{"negative duration", `{"budget": {"deadline": "-5m"}}`, `budget.deadline: "-5m" is negative`},
		{"invalid utf-8", "env: [\xff]\n", "not valid UTF-8"},
		{"then validated", `{"mounts": {"work/x": "rw"}}`, `mounts: "work/x" is not an absolute path`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.in))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Parse(%.60q) = %v, want an error containing %q", tt.in, err, tt.want)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	tools := func(allow ...string) kin.Policy { return kin.Policy{Tools: &kin.ToolRules{Allow: allow}} }
	mounts := func(kv ...string) kin.Policy {
		m := map[string]kin.Mode{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kin.Mode(kv[i+1])
		}
		return kin.Policy{Mounts: m}
	}
	tests := []struct {
		name string
		p    kin.Policy
		want string // "" = valid
	}{
		{"empty policy", kin.Policy{}, ""},
		{"tool names and globs", tools("read", "web_*", "mcp__gh__?", "a.b:c-d"), ""},
		{"empty tool pattern", tools(""), `tools.allow: "" is empty`},
		{"long tool pattern", tools(strings.Repeat("a", 129)), "at most 128"},
		{"tool pattern with a class", tools("[ab]"), `tools.allow: "[ab]" has '['`},
		{"tool pattern with a slash", kin.Policy{Tools: &kin.ToolRules{Deny: []string{"a/b"}}}, `tools.deny: "a/b" has '/'`},
		{"env pattern with a space", kin.Policy{Env: []string{"A B"}}, `env: "A B" has ' '`},
		{"mounts", mounts("/", "hidden", "/work", "rw", "/usr", "ro"), ""},
		{"relative mount", mounts("work/x", "rw"), `mounts: "work/x" is not an absolute path`},
		{"unclean mount", mounts("/work/", "rw"), `mounts: path "/work/" is not clean`},
		{"dot-dot mount", mounts("/work/../etc", "rw"), `mounts: path "/work/../etc" has a ".." component`},
		{"NUL in mount", mounts("/wo\x00rk", "rw"), "NUL"},
		{"bad mode", mounts("/work", "rx"), `mounts: "/work" has the mode "rx"; a mode is rw, ro or hidden`},
		{"hidden inside visible", mounts("/work", "rw", "/work/secret", "hidden"),
			`mounts: "/work/secret" is hidden inside "/work" (rw): Landlock grants whole trees and cannot hide a path inside a visible one; list the siblings`},
		{"ro inside rw", mounts("/work", "rw", "/work/docs", "ro"), `"/work/docs" is ro inside "/work" (rw)`},
		{"hidden inside ro, nearest ancestor", mounts("/", "ro", "/work", "rw", "/work/x", "hidden"), `"/work/x" is hidden inside "/work" (rw)`},
		{"more visible inside less", mounts("/", "hidden", "/work", "ro", "/work/out", "rw"), ""},
		{"sibling prefix is no ancestor", mounts("/work", "rw", "/workx", "hidden"), ""},
		{"negative tokens", kin.Policy{Budget: &kin.Budget{MaxTokens: ptr(int64(-1))}}, "budget.max_tokens: -1 is negative"},
		{"negative open files", kin.Policy{Budget: &kin.Budget{OpenFiles: ptr(int64(-3))}}, "budget.open_files: -3 is negative"},
		{"no pids", kin.Policy{Budget: &kin.Budget{Pids: ptr(int64(0))}}, "budget.pids: 0 is below 1"},
		{"a tiny memory", kin.Policy{Budget: &kin.Budget{Memory: ptr(int64(4096))}}, "budget.memory: 4096 bytes is below 1048576"},
		{"no cpu", kin.Policy{Budget: &kin.Budget{CPU: ptr(0.0)}}, "budget.cpu: 0 cores is not between 0.01 and 4096"},
		{"NaN cpu", kin.Policy{Budget: &kin.Budget{CPU: ptr(math.NaN())}}, "budget.cpu: NaN cores"},
		{"subtree limits", kin.Policy{Budget: &kin.Budget{Pids: ptr(int64(50)), Memory: ptr(int64(1 << 30)), CPU: ptr(0.5)}}, ""},
		{"infinite cost", kin.Policy{Budget: &kin.Budget{MaxCost: ptr(math.Inf(1))}}, "budget.max_cost: +Inf is not a finite number"},
		{"NaN cost", kin.Policy{Budget: &kin.Budget{MaxCost: ptr(math.NaN())}}, "budget.max_cost: NaN"},
		{"negative deadline", kin.Policy{Budget: &kin.Budget{Deadline: ptr(kin.Duration(-time.Second))}}, "budget.deadline"},
		{"zero budget", kin.Policy{Budget: &kin.Budget{MaxTokens: ptr(int64(0)), MaxCost: ptr(0.0)}}, ""},
		{"roles", kin.Policy{Spawn: &kin.SpawnRules{Roles: []string{"coder", "rev.1", "a:b"}}}, ""},
		{"role with a dash", kin.Policy{Spawn: &kin.SpawnRules{Roles: []string{"re-view"}}}, `spawn.roles: "re-view" has '-'`},
		{"visibility", kin.Policy{Visibility: &kin.Visibility{ReadFrom: []string{"mano", "12"}, ReadableTo: []string{"HO@Server1"}, Scope: []string{"memory/**", "SOUL.md", "*.md"}}}, ""},
		{"reader with a space", kin.Policy{Visibility: &kin.Visibility{ReadFrom: []string{"ma no"}}}, `visibility.read_from: "ma no" contains ' '`},
		{"empty readable_to", kin.Policy{Visibility: &kin.Visibility{ReadableTo: []string{""}}}, `visibility.readable_to: "" is empty`},
		{"absolute scope", kin.Policy{Visibility: &kin.Visibility{Scope: []string{"/etc/**"}}}, `visibility.scope: "/etc/**" is absolute`},
		{"dot-dot scope", kin.Policy{Visibility: &kin.Visibility{Scope: []string{"memory/../**"}}}, `visibility.scope: "memory/../**" has a ".." component`},
		{"unclean scope", kin.Policy{Visibility: &kin.Visibility{Scope: []string{"./memory/**"}}}, `visibility.scope: "./memory/**" is not clean`},
		{"bad glob scope", kin.Policy{Visibility: &kin.Visibility{Scope: []string{"memory/[a"}}}, "is not a valid glob pattern"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Validate(tt.p)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Validate = %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Validate = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}
