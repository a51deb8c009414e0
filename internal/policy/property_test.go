package policy

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/kin-agents/kin/kin"
)

// The property of seed 001: a child that Exceeds accepts gets nothing its
// parent lacks (soundness), and a child that would get something its
// parent lacks is refused (completeness). Both are checked by brute force
// over small universes: tool and env names of up to 3 bytes over
// {a, b, _, c} ('c' is in no pattern), a set of paths, groups, ids and
// limits drawn from small ranges.

var (
	patternAlphabet = "ab_*?"
	nameUniverse    = allNames("ab_c", 3)
	mountPaths      = []string{"/", "/a", "/a/b", "/c"} // ancestors first
	checkPaths      = []string{"/", "/a", "/a/b", "/a/b/c", "/a/c", "/ab", "/c", "/c/a", "/d"}
)

// gen draws values from a source of small integers: math/rand in the
// property test, the fuzzer's bytes in FuzzAttenuation.
type gen struct{ intn func(n int) int }

func (g gen) pattern() string {
	b := make([]byte, 1+g.intn(4))
	for i := range b {
		b[i] = patternAlphabet[g.intn(len(patternAlphabet))]
	}
	return string(b)
}

func (g gen) patterns(max int) []string {
	out := []string{}
	for range g.intn(max + 1) {
		out = append(out, g.pattern())
	}
	return out
}

func (g gen) tools() *kin.ToolRules {
	switch g.intn(4) {
	case 0:
		return nil
	case 1:
		return &kin.ToolRules{Deny: g.patterns(2)}
	}
	return &kin.ToolRules{Allow: g.patterns(3), Deny: g.patterns(2)}
}

func (g gen) maybeInt(max int64) *int64 {
	if g.intn(2) == 0 {
		return nil
	}
	return ptr(int64(g.intn(int(max + 1))))
}

func (g gen) policy() kin.Policy {
	p := kin.Policy{Tools: g.tools(), Mounts: randomMounts(g.intn, mountPaths)}
	if g.intn(2) == 0 {
		p.Groups = []uint32{}
		for _, gr := range []uint32{1, 2, 3} {
			if g.intn(2) == 0 {
				p.Groups = append(p.Groups, gr)
			}
		}
	}
	if g.intn(2) == 0 {
		p.Env = g.patterns(2)
	}
	if g.intn(3) == 0 {
		p.UID = ptr(uint32(g.intn(2)))
	}
	if g.intn(3) == 0 {
		p.GID = ptr(uint32(g.intn(2)))
	}
	if g.intn(2) == 0 {
		p.Detach = ptr(g.intn(2) == 0)
	}
	if g.intn(2) == 0 {
		p.Spawn = &kin.SpawnRules{}
		if g.intn(2) == 0 {
			p.Spawn.Allow = ptr(g.intn(2) == 0)
		}
		if g.intn(2) == 0 {
			p.Spawn.Roles = []string{}
			for _, r := range []string{"r1", "r2", "r3"} {
				if g.intn(2) == 0 {
					p.Spawn.Roles = append(p.Spawn.Roles, r)
				}
			}
		}
	}
	if g.intn(2) == 0 {
		p.Budget = &kin.Budget{
			MaxTokens: g.maybeInt(3), MaxDescendants: g.maybeInt(3),
			CPUSeconds: g.maybeInt(3), MemoryBytes: g.maybeInt(3), OpenFiles: g.maybeInt(3),
		}
		if n := g.maybeInt(3); n != nil {
			p.Budget.Pids = ptr(*n + 1)
		}
		if n := g.maybeInt(3); n != nil {
			p.Budget.Memory = ptr((*n + 1) << 20)
		}
		if n := g.maybeInt(3); n != nil {
			p.Budget.CPU = ptr(float64(*n+1) / 4)
		}
		if c := g.maybeInt(3); c != nil {
			p.Budget.MaxCost = ptr(float64(*c) / 2)
		}
		if d := g.maybeInt(3); d != nil {
			p.Budget.Deadline = ptr(kin.Duration(time.Duration(*d) * time.Minute))
		}
	}
	return p
}

type attenuationCase struct {
	parent []kin.PolicyLayer
	rem    Remaining
	child  kin.Policy
	preset *kin.ToolRules
}

func (g gen) attenuationCase() attenuationCase {
	var c attenuationCase
	sources := []kin.PolicySource{kin.SourceGlobal, kin.SourcePreset, kin.SourcePolicy}
	for i := range g.intn(4) {
		c.parent = append(c.parent, kin.PolicyLayer{Source: sources[g.intn(3)], Agent: kin.AgentID(i + 1), Name: "p", Policy: g.policy()})
	}
	c.child = g.policy()
	if g.intn(3) == 0 {
		c.preset = g.tools()
	}
	if d := g.maybeInt(3); d != nil {
		c.rem.DeadlineAt = now.Add(time.Duration(*d) * time.Minute)
	}
	c.rem.Tokens, c.rem.Descendants = g.maybeInt(3), g.maybeInt(3)
	if v := g.maybeInt(3); v != nil {
		c.rem.Cost = ptr(float64(*v) / 2)
	}
	return c
}

func (c attenuationCase) String() string {
	return fmt.Sprintf("parent %+v\nrem %+v\nchild %+v\npreset %+v", c.parent, c.rem, c.child, c.preset)
}

// parentAllowsTool and parentAllowsEnv are AllowTool and AllowEnv without
// the words: the definitions, written again as plainly as possible.
func parentAllowsTool(layers []kin.PolicyLayer, name string) bool {
	for _, l := range layers {
		if t := l.Policy.Tools; t != nil && !rulesAllow(t, name) {
			return false
		}
	}
	return true
}

func parentAllowsEnv(layers []kin.PolicyLayer, name string) bool {
	for _, l := range layers {
		if l.Policy.Env != nil && !matchAny(l.Policy.Env, name) {
			return false
		}
	}
	return true
}

// rulesAllow is a tool rule set's own verdict.
func rulesAllow(r *kin.ToolRules, name string) bool {
	return (r.Allow == nil || matchAny(r.Allow, name)) && !matchAny(r.Deny, name)
}

func ownMode(m map[string]kin.Mode, p string) kin.Mode {
	_, mode, _ := lookup(m, p)
	return mode
}

// violations lists, by brute force, the fields in which the child would
// hold something the parent lacks: one string per field, with an example.
func violations(c attenuationCase) map[string]string {
	out := map[string]string{}
	flag := func(field, example string) {
		if _, seen := out[field]; !seen {
			out[field] = example
		}
	}
	operator := len(c.parent) == 0
	if !operator {
		flat := Flatten(c.parent)
		for field, r := range map[string]*kin.ToolRules{"tools": c.child.Tools, "preset": c.preset} {
			if r == nil {
				continue
			}
			for _, n := range nameUniverse {
				if rulesAllow(r, n) && !parentAllowsTool(c.parent, n) {
					flag(field, n)
				}
			}
		}
		if c.child.Mounts != nil {
			for _, p := range checkPaths {
				if has, _, _ := PathMode(c.parent, p); ownMode(c.child.Mounts, p).Rank() > has.Rank() {
					flag("mounts", p)
				}
			}
		}
		for _, g := range c.child.Groups {
			if !slices.Contains(flat.Groups, g) {
				flag("groups", fmt.Sprint(g))
			}
		}
		for _, e := range c.child.Env {
			for _, n := range nameUniverse {
				if MatchTool(e, n) && !parentAllowsEnv(c.parent, n) {
					flag("env", n)
				}
			}
		}
		if c.child.UID != nil && (flat.UID == nil || *flat.UID != *c.child.UID) {
			flag("uid", "")
		}
		if c.child.GID != nil && (flat.GID == nil || *flat.GID != *c.child.GID) {
			flag("gid", "")
		}
		if c.child.Detach != nil && *c.child.Detach && (flat.Detach == nil || !*flat.Detach) {
			flag("detach", "")
		}
		if s := c.child.Spawn; s != nil && flat.Spawn != nil {
			if s.Allow != nil && *s.Allow && flat.Spawn.Allow != nil && !*flat.Spawn.Allow {
				flag("spawn.allow", "")
			}
			for _, r := range s.Roles {
				if flat.Spawn.Roles != nil && !slices.Contains(flat.Spawn.Roles, r) {
					flag("spawn.roles", r)
				}
			}
		}
		if b, has := c.child.Budget, flat.Budget; b != nil && has != nil {
			limit := func(field string, a, h *int64) {
				if a != nil && h != nil && *a > *h {
					flag(field, "")
				}
			}
			limit("budget.cpu_seconds", b.CPUSeconds, has.CPUSeconds)
			limit("budget.memory_bytes", b.MemoryBytes, has.MemoryBytes)
			limit("budget.open_files", b.OpenFiles, has.OpenFiles)
			limit("budget.pids", b.Pids, has.Pids)
			limit("budget.memory", b.Memory, has.Memory)
			if b.CPU != nil && has.CPU != nil && *b.CPU > *has.CPU {
				flag("budget.cpu", "")
			}
		}
	}
	if b := c.child.Budget; b != nil {
		if b.Deadline != nil && !c.rem.DeadlineAt.IsZero() && now.Add(time.Duration(*b.Deadline)).After(c.rem.DeadlineAt) {
			flag("budget.deadline", "")
		}
		if b.MaxTokens != nil && c.rem.Tokens != nil && *b.MaxTokens > *c.rem.Tokens {
			flag("budget.max_tokens", "")
		}
		if b.MaxCost != nil && c.rem.Cost != nil && *b.MaxCost > *c.rem.Cost {
			flag("budget.max_cost", "")
		}
		if b.MaxDescendants != nil && c.rem.Descendants != nil && *b.MaxDescendants > *c.rem.Descendants {
			flag("budget.max_descendants", "")
		}
	}
	return out
}

// checkAttenuation asserts soundness and completeness for one case. For
// tools and env, Exceeds may see a violation beyond the brute-force
// universe (a longer name): then its witness must be a real one.
func checkAttenuation(t *testing.T, c attenuationCase) {
	t.Helper()
	for _, l := range c.parent {
		if err := Validate(l.Policy); err != nil {
			t.Fatalf("generated an invalid parent layer: %v\n%v", err, c)
		}
	}
	// The plain definitions above agree with the functions that explain.
	for _, n := range nameUniverse[:12] {
		if d, _ := AllowTool(c.parent, n); d.Allowed != parentAllowsTool(c.parent, n) {
			t.Fatalf("AllowTool(%q) = %+v, the definition says %v\n%v", n, d, !d.Allowed, c)
		}
		if d := AllowEnv(c.parent, n); d.Allowed != parentAllowsEnv(c.parent, n) {
			t.Fatalf("AllowEnv(%q) = %+v, the definition says %v\n%v", n, d, !d.Allowed, c)
		}
	}
	ex := Exceeds(c.parent, c.rem, now, c.child, c.preset)
	if ex != nil && len(ex) == 0 {
		t.Fatalf("Exceeds returned an empty, non-nil list")
	}
	got := map[string]bool{}
	for _, e := range ex {
		got[e.Field] = true
	}
	want := violations(c)
	for field, example := range want {
		if !got[field] {
			t.Fatalf("the child gains %s (%q) over its parent, but Exceeds = %s\n%v", field, example, FormatExcess(ex), c)
		}
	}
	for field := range got {
		if _, ok := want[field]; ok {
			continue
		}
		switch field {
		case "tools", "preset":
			r := c.child.Tools
			if field == "preset" {
				r = c.preset
			}
			for _, g := range toolGaps(c.parent, r, toolsOf) {
				if g.err != nil {
					t.Fatalf("%v on a small case\n%v", g.err, c)
				}
				if d, _ := AllowTool(c.parent, g.witness); !rulesAllow(r, g.witness) || d.Allowed {
					t.Fatalf("%s witness %q is no violation\n%v", field, g.witness, c)
				}
			}
		case "env":
			for _, g := range envGaps(c.parent, c.child.Env) {
				if g.err != nil || !MatchTool(g.pattern, g.witness) || AllowEnv(c.parent, g.witness).Allowed {
					t.Fatalf("env witness %q of %q is no violation (%v)\n%v", g.witness, g.pattern, g.err, c)
				}
			}
		default:
			t.Fatalf("Exceeds reports %s, which brute force does not find:\n%s\n%v", field, FormatExcess(ex), c)
		}
	}
}

func TestPropertyNoAcceptedChildExceedsParent(t *testing.T) {
	r := rand.New(rand.NewPCG(2026, 1))
	g := gen{intn: r.IntN}
	accepted := 0
	for range 4000 {
		c := g.attenuationCase()
		checkAttenuation(t, c)
		if Exceeds(c.parent, c.rem, now, c.child, c.preset) == nil {
			accepted++
		}
	}
	// The generator must exercise both answers, or the property says little.
	t.Logf("%d of 4000 random children accepted", accepted)
	if accepted < 400 || accepted > 3600 {
		t.Errorf("%d of 4000 random children accepted; the generator is lopsided", accepted)
	}
}

// byteSource reads small integers from fuzz input; past its end it gives
// zeros, so every input is a complete case.
type byteSource struct{ b []byte }

func (s *byteSource) intn(n int) int {
	if len(s.b) == 0 || n <= 1 {
		return 0
	}
	v := int(s.b[0])
	s.b = s.b[1:]
	return v % n
}

func FuzzAttenuation(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("\x03\x02\x01\x00\x03\x02\x01\x00\x01\x01\x02\x03"))
	f.Fuzz(func(t *testing.T, data []byte) {
		src := &byteSource{b: data}
		checkAttenuation(t, gen{intn: src.intn}.attenuationCase())
	})
}
