package policy

import (
	"reflect"
	"testing"
	"time"

	"github.com/kin-agents/kin/kin"
)

var now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// fields returns the Field of each excess, for comparing with a table.
func fields(ex []kin.Excess) []string {
	var out []string
	for _, e := range ex {
		out = append(out, e.Field)
	}
	return out
}

// Seed 001, "Permission Attenuation": each rule is a case, by its words.
func TestExceedsSeed001(t *testing.T) {
	parent := []kin.PolicyLayer{own(1, kin.Policy{
		Tools:  &kin.ToolRules{Allow: []string{"read", "write", "web_*"}, Deny: []string{"web_post"}},
		Mounts: modes("/", "hidden", "/work", "rw", "/docs", "ro"),
		Groups: []uint32{100, 200},
	})}
	tests := []struct {
		name  string
		child kin.Policy
		want  []string // the fields that exceed; nil: accepted
	}{
		{"parent rw may become child ro", kin.Policy{Mounts: modes("/work", "ro")}, nil},
		{"parent visible may become child hidden", kin.Policy{Mounts: modes("/work", "rw", "/docs", "hidden")}, nil},
		{"parent ro must not become child rw", kin.Policy{Mounts: modes("/docs", "rw")}, []string{"mounts"}},
		{"parent hidden must not become child visible", kin.Policy{Mounts: modes("/etc", "ro")}, []string{"mounts"}},
		{"parent hidden must not become child visible at the root", kin.Policy{Mounts: modes("/", "ro")}, []string{"mounts"}},
		{"child policy subset: fewer tools", kin.Policy{Tools: &kin.ToolRules{Allow: []string{"read", "web_search"}}}, nil},
		{"child policy subset: a tool the parent lacks", kin.Policy{Tools: &kin.ToolRules{Allow: []string{"read", "exec"}}}, []string{"tools"}},
		{"child policy subset: a glob wider than the parent's", kin.Policy{Tools: &kin.ToolRules{Allow: []string{"web_*"}}}, []string{"tools"}},
		{"child policy subset: the glob with the parent's deny carved out", kin.Policy{Tools: &kin.ToolRules{Allow: []string{"web_*"}, Deny: []string{"web_post"}}}, nil},
		{"child policy subset: no allow list means every tool", kin.Policy{Tools: &kin.ToolRules{Deny: []string{"exec"}}}, []string{"tools"}},
		{"child mounts subset of parent visible mounts", kin.Policy{Mounts: modes("/work/src", "rw", "/docs/spec", "ro")}, nil},
		{"child mounts subset of parent visible mounts: a sibling prefix", kin.Policy{Mounts: modes("/workx", "ro")}, []string{"mounts"}},
		{"child mounts: nothing visible", kin.Policy{Mounts: map[string]kin.Mode{}}, nil},
		{"child mounts: inherited when absent", kin.Policy{}, nil},
		{"child groups subset", kin.Policy{Groups: []uint32{200}}, nil},
		{"child groups subset: a group the parent lacks", kin.Policy{Groups: []uint32{100, 300}}, []string{"groups"}},
		{"child groups subset: none", kin.Policy{Groups: []uint32{}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ex := Exceeds(parent, Remaining{}, now, tt.child, nil)
			if got := fields(ex); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Exceeds = %v\n%s", got, FormatExcess(ex))
			}
		})
	}
}

func TestExceedsTools(t *testing.T) {
	globalExec := []kin.PolicyLayer{global("exec")}
	tests := []struct {
		name   string
		parent []kin.PolicyLayer
		child  *kin.ToolRules
		preset *kin.ToolRules
		want   string // FormatExcess; "" = accepted
	}{
		{"everything but what the parent denies", globalExec, &kin.ToolRules{Allow: []string{"*"}, Deny: []string{"exec"}}, nil, ""},
		{"everything", globalExec, &kin.ToolRules{Allow: []string{"*"}}, nil,
			`tools: asked for * (e.g. "exec"); the global deny list denies exec`},
		{"a witness from the glob", []kin.PolicyLayer{own(2, kin.Policy{Tools: &kin.ToolRules{Allow: []string{"web_search", "read"}}})},
			&kin.ToolRules{Allow: []string{"read", "web_*"}}, nil,
			`tools: asked for web_* (e.g. "web_"); the policy of agent 2 allows only [web_search read]`},
		{"a deny that carves only part", globalExec, &kin.ToolRules{Allow: []string{"e*"}, Deny: []string{"exe"}}, nil,
			`tools: asked for e* except [exe] (e.g. "exec"); the global deny list denies exec`},
		{"the preset is checked too", []kin.PolicyLayer{preset(1, "restricted", DefaultConfig().Presets["restricted"])},
			&kin.ToolRules{Allow: []string{"read"}}, ptr(DefaultConfig().Presets["supervised"]),
			`preset: asked for write; the stage preset "restricted" of agent 1 denies write` + "\n" +
				`preset: asked for edit; the stage preset "restricted" of agent 1 denies edit` + "\n" +
				`preset: asked for web_search; the stage preset "restricted" of agent 1 allows only [read memory_search memory_get]` + "\n" +
				`preset: asked for web_fetch; the stage preset "restricted" of agent 1 allows only [read memory_search memory_get]` + "\n" +
				`preset: asked for exec; the stage preset "restricted" of agent 1 denies exec`},
		{"a narrower preset", []kin.PolicyLayer{preset(1, "supervised", DefaultConfig().Presets["supervised"])},
			nil, ptr(DefaultConfig().Presets["restricted"]), ""},
		{"every layer counts", []kin.PolicyLayer{own(1, kin.Policy{Tools: &kin.ToolRules{Allow: []string{"a*"}}}), own(2, kin.Policy{Tools: &kin.ToolRules{Allow: []string{"*b"}}})},
			&kin.ToolRules{Allow: []string{"a*b"}}, nil, ""},
		{"an empty allow list asks for nothing", globalExec, &kin.ToolRules{Allow: []string{}}, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := FormatExcess(Exceeds(tt.parent, Remaining{}, now, kin.Policy{Tools: tt.child}, tt.preset))
			if got != tt.want {
				t.Fatalf("got\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}

func TestExceedsOtherFields(t *testing.T) {
	parent := []kin.PolicyLayer{own(1, kin.Policy{
		Env:    []string{"LC_*", "HOME"},
		UID:    ptr(uint32(1000)),
		Detach: ptr(false),
		Spawn:  &kin.SpawnRules{Allow: ptr(false), Roles: []string{"coder", "reviewer"}},
		Budget: &kin.Budget{CPUSeconds: ptr(int64(60)), MemoryBytes: ptr(int64(1 << 30)), Pids: ptr(int64(50)), Memory: ptr(int64(1 << 30)), CPU: ptr(0.5)},
	})}
	tests := []struct {
		name  string
		child kin.Policy
		want  []string
	}{
		{"env within", kin.Policy{Env: []string{"LC_ALL", "LC_*", "HOME"}}, nil},
		{"env beyond", kin.Policy{Env: []string{"L*"}}, []string{"env"}},
		{"the same uid", kin.Policy{UID: ptr(uint32(1000))}, nil},
		{"another uid", kin.Policy{UID: ptr(uint32(0))}, []string{"uid"}},
		{"a gid the parent does not set", kin.Policy{GID: ptr(uint32(1000))}, []string{"gid"}},
		{"detach false", kin.Policy{Detach: ptr(false)}, nil},
		{"detach true", kin.Policy{Detach: ptr(true)}, []string{"detach"}},
		{"spawn denied", kin.Policy{Spawn: &kin.SpawnRules{Allow: ptr(false)}}, nil},
		{"spawn asked under a parent that may not", kin.Policy{Spawn: &kin.SpawnRules{Allow: ptr(true)}}, []string{"spawn.allow"}},
		{"roles within", kin.Policy{Spawn: &kin.SpawnRules{Roles: []string{"coder"}}}, nil},
		{"a role beyond", kin.Policy{Spawn: &kin.SpawnRules{Roles: []string{"coder", "admin"}}}, []string{"spawn.roles"}},
		{"process limits within", kin.Policy{Budget: &kin.Budget{CPUSeconds: ptr(int64(60)), MemoryBytes: ptr(int64(1 << 20))}}, nil},
		{"process limits beyond", kin.Policy{Budget: &kin.Budget{CPUSeconds: ptr(int64(61)), OpenFiles: ptr(int64(1 << 20))}}, []string{"budget.cpu_seconds"}},
		{"subtree limits within", kin.Policy{Budget: &kin.Budget{Pids: ptr(int64(50)), Memory: ptr(int64(1 << 29)), CPU: ptr(0.25)}}, nil},
		{"subtree limits beyond", kin.Policy{Budget: &kin.Budget{Pids: ptr(int64(51)), Memory: ptr(int64(1<<30 + 1)), CPU: ptr(0.75)}}, []string{"budget.pids", "budget.memory", "budget.cpu"}},
		{"no limit asked is the parent's limit", kin.Policy{Budget: &kin.Budget{}}, nil},
		{"visibility is not the parent's to give", kin.Policy{Visibility: &kin.Visibility{ReadFrom: []string{"anyone"}, Scope: []string{"**"}}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ex := Exceeds(parent, Remaining{}, now, tt.child, nil)
			if got := fields(ex); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Exceeds = %v\n%s", got, FormatExcess(ex))
			}
		})
	}
}

func TestExceedsBudget(t *testing.T) {
	rem := Remaining{DeadlineAt: now.Add(time.Hour), Tokens: ptr(int64(1000)), Cost: ptr(1.5), Descendants: ptr(int64(3))}
	tests := []struct {
		name   string
		budget kin.Budget
		want   []string
	}{
		{"within", kin.Budget{Deadline: ptr(kin.Duration(time.Hour)), MaxTokens: ptr(int64(1000)), MaxCost: ptr(1.5), MaxDescendants: ptr(int64(3))}, nil},
		{"unlimited inherits", kin.Budget{}, nil},
		{"deadline after the parent's", kin.Budget{Deadline: ptr(kin.Duration(time.Hour + time.Second))}, []string{"budget.deadline"}},
		{"tokens", kin.Budget{MaxTokens: ptr(int64(1001))}, []string{"budget.max_tokens"}},
		{"cost", kin.Budget{MaxCost: ptr(1.51)}, []string{"budget.max_cost"}},
		{"descendants", kin.Budget{MaxDescendants: ptr(int64(4))}, []string{"budget.max_descendants"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ex := Exceeds([]kin.PolicyLayer{own(1, kin.Policy{})}, rem, now, kin.Policy{Budget: &tt.budget}, nil)
			if got := fields(ex); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Exceeds = %v\n%s", got, FormatExcess(ex))
			}
		})
	}
}

// A root agent's parent is the operator, who holds everything: only the
// budget is checked.
func TestExceedsOperatorHoldsEverything(t *testing.T) {
	child := kin.Policy{
		Tools:  &kin.ToolRules{},
		Mounts: modes("/", "rw"),
		Groups: []uint32{0},
		UID:    ptr(uint32(0)),
		Detach: ptr(true),
		Spawn:  &kin.SpawnRules{Allow: ptr(true)},
		Budget: &kin.Budget{MaxTokens: ptr(int64(10)), CPUSeconds: ptr(int64(1 << 40))},
	}
	if ex := Exceeds(nil, Remaining{}, now, child, ptr(kin.ToolRules{})); ex != nil {
		t.Fatalf("Exceeds(operator) = %s", FormatExcess(ex))
	}
	ex := Exceeds(nil, Remaining{Tokens: ptr(int64(5))}, now, child, nil)
	if got := fields(ex); !reflect.DeepEqual(got, []string{"budget.max_tokens"}) {
		t.Fatalf("Exceeds(operator, 5 tokens left) = %s", FormatExcess(ex))
	}
	// An agent parent, even with an empty layer, holds no groups, uid or detach.
	ex = Exceeds([]kin.PolicyLayer{own(1, kin.Policy{})}, Remaining{}, now, child, nil)
	if got := fields(ex); !reflect.DeepEqual(got, []string{"groups", "uid", "detach"}) {
		t.Fatalf("Exceeds(empty agent layer) = %v\n%s", got, FormatExcess(ex))
	}
}

func TestFormatExcess(t *testing.T) {
	got := FormatExcess([]kin.Excess{
		{Field: "tools", Asked: `"exec"`, Parent: "the parent allows [read]"},
		{Field: "groups", Asked: "7", Parent: "the parent holds no supplementary groups"},
	})
	want := "tools: asked for \"exec\"; the parent allows [read]\ngroups: asked for 7; the parent holds no supplementary groups"
	if got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestMerge(t *testing.T) {
	base := kin.Policy{
		Tools:  &kin.ToolRules{Allow: []string{"read"}, Deny: []string{"exec"}},
		Mounts: modes("/work", "rw", "/usr", "ro"),
		Groups: []uint32{1},
		Budget: &kin.Budget{Deadline: ptr(kin.Duration(time.Hour)), MaxTokens: ptr(int64(10))},
		Spawn:  &kin.SpawnRules{Roles: []string{"coder"}},
	}
	over := kin.Policy{
		Tools:  &kin.ToolRules{Deny: []string{"write"}},
		Mounts: modes("/work", "ro"),
		Groups: []uint32{},
		Budget: &kin.Budget{MaxTokens: ptr(int64(5))},
		Detach: ptr(false),
	}
	want := kin.Policy{
		Tools:  &kin.ToolRules{Allow: []string{"read"}, Deny: []string{"write"}},
		Mounts: modes("/work", "ro"),
		Groups: []uint32{},
		Budget: &kin.Budget{Deadline: ptr(kin.Duration(time.Hour)), MaxTokens: ptr(int64(5))},
		Spawn:  &kin.SpawnRules{Roles: []string{"coder"}},
		Detach: ptr(false),
	}
	got := Merge(base, over)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Merge =\n%+v\nwant\n%+v", got, want)
	}
	got.Tools.Allow[0] = "changed"
	*got.Budget.Deadline = 0
	if base.Tools.Allow[0] != "read" || *base.Budget.Deadline != kin.Duration(time.Hour) {
		t.Error("Merge's result shares memory with base")
	}
	if got := Merge(base, kin.Policy{}); !reflect.DeepEqual(got, base) {
		t.Errorf("Merge(base, {}) = %+v, want base", got)
	}
}
