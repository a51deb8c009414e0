package policy

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/kin-agents/kin/kin"
)

// Remaining is what the parent's subtree may still spend, filled in by the
// daemon after counting the spawn being checked; nil (or a zero
// DeadlineAt) is unlimited.
type Remaining struct {
	DeadlineAt  time.Time
	Tokens      *int64
	Cost        *float64
	Descendants *int64
}

// Exceeds lists every item of child's request that the parent lacks, or
// nil. parent is the parent's effective policy as layers (the AND of them);
// childPreset is the rules of the child's own stage, if it has one; both
// the child's tools and its preset are checked, each on its own.
//
// No parent layers means the parent is the operator, who holds everything:
// then only the budget is checked against rem.
//
// Absent fields ask for nothing: a child that leaves a field nil inherits
// the parent's, so it is never an excess. In particular a child asking no
// limit where the parent has one is not an excess: it gets the parent's
// limit. The rules, field by field:
//
//   - tools: every name the child's rules allow by themselves (allow minus
//     deny; a nil allow is "*") must be allowed by every parent layer. This
//     is exact, and the child's deny list counts: allow ["*"] deny ["exec"]
//     fits under a parent that denies only exec. Asked gives a witness.
//     Patterns too costly to compare (ErrTooComplex) are refused.
//   - models: as tools, over model names (the model gateway's allow list).
//   - mounts: at each path the child lists (and each the parent lists), the
//     child's mode must not be above the parent's: rw may become ro,
//     visible may become hidden, never the reverse.
//   - groups: each must be in the parent's flattened groups; a parent with
//     none listed holds no supplementary groups.
//   - env: each pattern's names must be within every parent layer's env
//     patterns (a layer without env allows every name).
//   - uid, gid: only the parent's own flattened uid and gid.
//   - detach: true only if the parent's flattened detach is true.
//   - spawn: allow true is refused under a parent whose allow is false;
//     roles must be within the parent's roles, when it lists roles.
//   - budget: the child's deadline (now + deadline) must not pass
//     rem.DeadlineAt; max_tokens, max_cost and max_descendants must fit in
//     rem; cpu_seconds, memory_bytes, open_files, pids, memory and cpu
//     must not exceed the parent's flattened limits (the kernel nests the
//     subtree limits: a child's cgroup lies in its parent's, so it gets at
//     most what its parent's subtree has left).
//   - visibility is consent between workspaces, not the parent's to give:
//     it is not checked.
//
// child and childPreset are assumed valid (Validate); invalid input gives
// a conservative answer, never a panic.
func Exceeds(parent []kin.PolicyLayer, rem Remaining, now time.Time, child kin.Policy, childPreset *kin.ToolRules) []kin.Excess {
	var out []kin.Excess
	if len(parent) > 0 {
		flat := Flatten(parent)
		if child.Tools != nil {
			out = append(out, toolExcess("tools", parent, child.Tools)...)
		}
		if childPreset != nil {
			out = append(out, toolExcess("preset", parent, childPreset)...)
		}
		if child.Models != nil {
			out = append(out, ruleExcess("models", parent, child.Models, modelsOf)...)
		}
		out = append(out, mountExcess(parent, child.Mounts)...)
		out = append(out, groupExcess(flat, child.Groups)...)
		out = append(out, envExcess(parent, child.Env)...)
		out = append(out, idExcess(flat, child)...)
		out = append(out, spawnExcess(flat, child.Spawn)...)
		out = append(out, limitExcess(flat.Budget, child.Budget)...)
	}
	out = append(out, budgetExcess(rem, now, child.Budget)...)
	if len(out) == 0 {
		return nil
	}
	return out
}

// gap is one pattern of the child's that a parent layer lacks, with a
// witness name (empty when err says the comparison was too costly).
type gap struct {
	pattern string
	witness string
	layer   int
	err     error
}

// toolsOf and modelsOf select the rules a check compares: tools, or models.
func toolsOf(p *kin.Policy) *kin.ToolRules  { return p.Tools }
func modelsOf(p *kin.Policy) *kin.ToolRules { return p.Models }

// toolGaps checks each of the child's allow patterns against each parent
// layer, and reports a pattern once, with the first layer that lacks it.
func toolGaps(parent []kin.PolicyLayer, rules *kin.ToolRules, of func(*kin.Policy) *kin.ToolRules) []gap {
	allow := rules.Allow
	if allow == nil {
		allow = []string{"*"}
	}
	var out []gap
	for _, a := range allow {
		for i := range parent {
			t := of(&parent[i].Policy)
			if t == nil {
				continue
			}
			w, found, err := beyond(a, rules.Deny, t)
			if err != nil || found {
				out = append(out, gap{pattern: a, witness: w, layer: i, err: err})
				break
			}
		}
	}
	return out
}

func toolExcess(field string, parent []kin.PolicyLayer, rules *kin.ToolRules) []kin.Excess {
	return ruleExcess(field, parent, rules, toolsOf)
}

// ruleExcess is toolExcess over the rules of selects (tools or models).
func ruleExcess(field string, parent []kin.PolicyLayer, rules *kin.ToolRules, of func(*kin.Policy) *kin.ToolRules) []kin.Excess {
	var out []kin.Excess
	for _, g := range toolGaps(parent, rules, of) {
		l := parent[g.layer]
		e := kin.Excess{Field: field, Asked: askedPattern(rules, g.pattern, g.witness, field)}
		if g.err != nil {
			e.Parent = fmt.Sprintf("%s has %s: %v", describe(l), ruleWords(of(&l.Policy)), g.err)
		} else {
			e.Parent = toolParent(l, of(&l.Policy), g.witness)
		}
		out = append(out, e)
	}
	return out
}

// beyond finds a shortest name that the child pattern a allows (and no
// child deny pattern blocks) but the parent layer's rules t do not allow.
func beyond(a string, childDeny []string, t *kin.ToolRules) (string, bool, error) {
	pats := []string{a}
	pats = append(pats, childDeny...)
	nd := len(childDeny)
	pats = append(pats, t.Allow...)
	na := len(t.Allow)
	pats = append(pats, t.Deny...)
	w, found, err := search(pats, func(acc []bool) bool {
		if !acc[0] || slices.Contains(acc[1:1+nd], true) {
			return false
		}
		parentAllows := t.Allow == nil || slices.Contains(acc[1+nd:1+nd+na], true)
		return !parentAllows || slices.Contains(acc[1+nd+na:], true)
	})
	return w, found, err
}

func askedPattern(rules *kin.ToolRules, a, witness, field string) string {
	what := a
	if rules.Allow == nil {
		what = "every tool"
		if field == "models" {
			what = "every model"
		}
	}
	// Only the deny patterns that carve something out of this one.
	var carved []string
	for _, d := range rules.Deny {
		if ok, _, err := Intersect(a, d); ok || err != nil {
			carved = append(carved, d)
		}
	}
	if len(carved) > 0 {
		what += " except " + list(carved)
	}
	if witness == "" || witness == a {
		return what
	}
	return fmt.Sprintf("%s (e.g. %q)", what, witness)
}

func toolParent(l kin.PolicyLayer, t *kin.ToolRules, w string) string {
	for _, d := range t.Deny {
		if MatchTool(d, w) {
			if l.Source == kin.SourceGlobal {
				return fmt.Sprintf("the global deny list denies %s", d)
			}
			return fmt.Sprintf("%s denies %s", describe(l), d)
		}
	}
	return fmt.Sprintf("%s allows only %s", describe(l), list(t.Allow))
}

func ruleWords(t *kin.ToolRules) string {
	return fmt.Sprintf("allow %s deny %s", list(t.Allow), list(t.Deny))
}

// mountExcess compares modes at every listed path: both sides' modes are
// constant between listed paths, so these are all the places where the
// child could see more than the parent.
func mountExcess(parent []kin.PolicyLayer, mounts map[string]kin.Mode) []kin.Excess {
	if mounts == nil {
		return nil
	}
	set := map[string]bool{}
	for p := range mounts {
		set[p] = true
	}
	for _, l := range parent {
		for p := range l.Policy.Mounts {
			set[p] = true
		}
	}
	var out []kin.Excess
	for _, p := range slices.Sorted(maps.Keys(set)) {
		if checkPath(p) != nil {
			if _, listed := mounts[p]; listed {
				out = append(out, kin.Excess{Field: "mounts", Asked: fmt.Sprintf("%q %s", p, mounts[p]), Parent: "no such path: " + checkPath(p).Error()})
			}
			continue
		}
		at, asked, ok := lookup(mounts, p)
		if !ok || norm(asked) == kin.ModeHidden {
			continue
		}
		has, d, _ := PathMode(parent, p)
		if rank(has) >= rank(asked) {
			continue
		}
		what := fmt.Sprintf("%q %s", p, norm(asked))
		if at != p {
			what = fmt.Sprintf("%q %s (from %q)", p, norm(asked), at)
		}
		out = append(out, kin.Excess{Field: "mounts", Asked: what, Parent: d.Reason})
	}
	return out
}

func groupExcess(flat kin.Policy, groups []uint32) []kin.Excess {
	var out []kin.Excess
	for _, g := range sortedSet(groups) {
		if !slices.Contains(flat.Groups, g) {
			has := "holds no supplementary groups"
			if len(flat.Groups) > 0 {
				has = fmt.Sprintf("holds only %v", flat.Groups)
			}
			out = append(out, kin.Excess{Field: "groups", Asked: fmt.Sprint(g), Parent: "the parent " + has})
		}
	}
	return out
}

// envGaps checks each of the child's env patterns against every parent
// layer that lists env patterns.
func envGaps(parent []kin.PolicyLayer, env []string) []gap {
	var out []gap
	for _, e := range env {
		for i, l := range parent {
			if l.Policy.Env == nil {
				continue
			}
			ok, w, err := Subset(e, l.Policy.Env)
			if err != nil || !ok {
				out = append(out, gap{pattern: e, witness: w, layer: i, err: err})
				break
			}
		}
	}
	return out
}

func envExcess(parent []kin.PolicyLayer, env []string) []kin.Excess {
	var out []kin.Excess
	for _, g := range envGaps(parent, env) {
		l := parent[g.layer]
		e := kin.Excess{Field: "env", Asked: g.pattern}
		if g.witness != "" && g.witness != g.pattern {
			e.Asked = fmt.Sprintf("%s (e.g. %q)", g.pattern, g.witness)
		}
		e.Parent = fmt.Sprintf("%s allows only %s", describe(l), list(l.Policy.Env))
		if g.err != nil {
			e.Parent += ": " + g.err.Error()
		}
		out = append(out, e)
	}
	return out
}

func idExcess(flat kin.Policy, child kin.Policy) []kin.Excess {
	var out []kin.Excess
	check := func(field string, asked, has *uint32) {
		if asked == nil || (has != nil && *has == *asked) {
			return
		}
		parent := "the parent runs as kin's own per-agent id"
		if has != nil {
			parent = fmt.Sprintf("the parent runs as %s %d", field, *has)
		}
		out = append(out, kin.Excess{Field: field, Asked: fmt.Sprint(*asked), Parent: parent})
	}
	check("uid", child.UID, flat.UID)
	check("gid", child.GID, flat.GID)
	if child.Detach != nil && *child.Detach && (flat.Detach == nil || !*flat.Detach) {
		out = append(out, kin.Excess{Field: "detach", Asked: "true", Parent: "the parent may not detach children"})
	}
	return out
}

func spawnExcess(flat kin.Policy, s *kin.SpawnRules) []kin.Excess {
	if s == nil || flat.Spawn == nil {
		return nil
	}
	var out []kin.Excess
	if s.Allow != nil && *s.Allow && flat.Spawn.Allow != nil && !*flat.Spawn.Allow {
		out = append(out, kin.Excess{Field: "spawn.allow", Asked: "true", Parent: "the parent may not spawn"})
	}
	if flat.Spawn.Roles != nil {
		for _, r := range sortedSet(s.Roles) {
			if !slices.Contains(flat.Spawn.Roles, r) {
				out = append(out, kin.Excess{Field: "spawn.roles", Asked: r, Parent: "the parent may spawn only " + list(flat.Spawn.Roles)})
			}
		}
	}
	return out
}

// limitExcess compares per-process limits with the parent's: they are the
// same kind of number at every level, unlike spend, which rem accounts.
func limitExcess(has, asked *kin.Budget) []kin.Excess {
	if has == nil || asked == nil {
		return nil
	}
	var out []kin.Excess
	over("budget.cpu_seconds", asked.CPUSeconds, has.CPUSeconds, "the parent's limit", &out)
	over("budget.memory_bytes", asked.MemoryBytes, has.MemoryBytes, "the parent's limit", &out)
	over("budget.open_files", asked.OpenFiles, has.OpenFiles, "the parent's limit", &out)
	over("budget.pids", asked.Pids, has.Pids, "the parent's subtree limit", &out)
	over("budget.memory", asked.Memory, has.Memory, "the parent's subtree limit", &out)
	over("budget.cpu", asked.CPU, has.CPU, "the parent's subtree limit", &out)
	return out
}

func budgetExcess(rem Remaining, now time.Time, asked *kin.Budget) []kin.Excess {
	if asked == nil {
		return nil
	}
	var out []kin.Excess
	if asked.Deadline != nil && !rem.DeadlineAt.IsZero() {
		at := now.Add(time.Duration(*asked.Deadline))
		if at.After(rem.DeadlineAt) || at.Before(now) { // Before: a negative (invalid) deadline
			out = append(out, kin.Excess{Field: "budget.deadline",
				Asked:  fmt.Sprintf("%v (until %s)", time.Duration(*asked.Deadline), at.UTC().Format(time.RFC3339)),
				Parent: fmt.Sprintf("the parent's subtree must end by %s (%v from now)", rem.DeadlineAt.UTC().Format(time.RFC3339), rem.DeadlineAt.Sub(now).Round(time.Second))})
		}
	}
	over("budget.max_tokens", asked.MaxTokens, rem.Tokens, "what the parent's subtree has left", &out)
	over("budget.max_cost", asked.MaxCost, rem.Cost, "what the parent's subtree has left", &out)
	over("budget.max_descendants", asked.MaxDescendants, rem.Descendants, "what the parent's subtree has left", &out)
	return out
}

func over[T cmp.Ordered](field string, asked, has *T, what string, out *[]kin.Excess) {
	if asked == nil || has == nil {
		return
	}
	if *asked <= *has {
		return // a NaN (never valid) compares false and is refused
	}
	*out = append(*out, kin.Excess{Field: field, Asked: fmt.Sprint(*asked), Parent: fmt.Sprintf("%s is %v", what, *has)})
}

// FormatExcess renders excess items one a line, for an error message:
//
//	tools: asked for exec; the global deny list denies exec
func FormatExcess(items []kin.Excess) string {
	var b strings.Builder
	for i, e := range items {
		if i > 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "%s: asked for %s; %s", e.Field, e.Asked, e.Parent)
	}
	return b.String()
}

// Merge returns base with every field that over sets replaced by over's:
// a template's policy fragment merged with the spawner's --policy, the
// spawner winning. Tools, Models, Spawn, Budget and Visibility merge field by field
// (over's tools.deny replaces only base's deny); Mounts replace wholly, as
// a mount map means "only these". The result shares nothing with either.
func Merge(base, over kin.Policy) kin.Policy {
	out := clonePolicy(base)
	o := clonePolicy(over)
	if o.Tools != nil {
		if out.Tools == nil {
			out.Tools = &kin.ToolRules{}
		}
		out.Tools.Allow = pickList(out.Tools.Allow, o.Tools.Allow)
		out.Tools.Deny = pickList(out.Tools.Deny, o.Tools.Deny)
	}
	if o.Models != nil {
		if out.Models == nil {
			out.Models = &kin.ToolRules{}
		}
		out.Models.Allow = pickList(out.Models.Allow, o.Models.Allow)
		out.Models.Deny = pickList(out.Models.Deny, o.Models.Deny)
	}
	if o.Mounts != nil {
		out.Mounts = o.Mounts
	}
	out.Groups = pickList(out.Groups, o.Groups)
	out.Env = pickList(out.Env, o.Env)
	out.UID = pick(out.UID, o.UID)
	out.GID = pick(out.GID, o.GID)
	out.Detach = pick(out.Detach, o.Detach)
	if o.Spawn != nil {
		if out.Spawn == nil {
			out.Spawn = &kin.SpawnRules{}
		}
		out.Spawn.Allow = pick(out.Spawn.Allow, o.Spawn.Allow)
		out.Spawn.Roles = pickList(out.Spawn.Roles, o.Spawn.Roles)
	}
	if b := o.Budget; b != nil {
		if out.Budget == nil {
			out.Budget = &kin.Budget{}
		}
		d := out.Budget
		d.Deadline = pick(d.Deadline, b.Deadline)
		d.MaxDescendants = pick(d.MaxDescendants, b.MaxDescendants)
		d.MaxTokens = pick(d.MaxTokens, b.MaxTokens)
		d.MaxCost = pick(d.MaxCost, b.MaxCost)
		d.CPUSeconds = pick(d.CPUSeconds, b.CPUSeconds)
		d.MemoryBytes = pick(d.MemoryBytes, b.MemoryBytes)
		d.OpenFiles = pick(d.OpenFiles, b.OpenFiles)
		d.Pids = pick(d.Pids, b.Pids)
		d.Memory = pick(d.Memory, b.Memory)
		d.CPU = pick(d.CPU, b.CPU)
	}
	if v := o.Visibility; v != nil {
		if out.Visibility == nil {
			out.Visibility = &kin.Visibility{}
		}
		out.Visibility.ReadFrom = pickList(out.Visibility.ReadFrom, v.ReadFrom)
		out.Visibility.ReadableTo = pickList(out.Visibility.ReadableTo, v.ReadableTo)
		out.Visibility.Scope = pickList(out.Visibility.Scope, v.Scope)
	}
	return out
}

// pick is over when it is set (non-nil), else base.
func pick[S any](base, over *S) *S {
	if over != nil {
		return over
	}
	return base
}

// pickList is pick for lists: an empty list is set, only nil is not.
func pickList[T any](base, over []T) []T {
	if over != nil {
		return over
	}
	return base
}

// clonePolicy deep-copies p, keeping nil and empty apart: an empty list
// restricts ("no groups"), a nil one does not.
func clonePolicy(p kin.Policy) kin.Policy {
	out := kin.Policy{
		Mounts: maps.Clone(p.Mounts),
		Groups: slices.Clone(p.Groups),
		Env:    slices.Clone(p.Env),
	}
	if p.Tools != nil {
		out.Tools = &kin.ToolRules{Allow: slices.Clone(p.Tools.Allow), Deny: slices.Clone(p.Tools.Deny)}
	}
	if p.Models != nil {
		out.Models = &kin.ToolRules{Allow: slices.Clone(p.Models.Allow), Deny: slices.Clone(p.Models.Deny)}
	}
	if p.UID != nil {
		out.UID = ptr(*p.UID)
	}
	if p.GID != nil {
		out.GID = ptr(*p.GID)
	}
	if p.Detach != nil {
		out.Detach = ptr(*p.Detach)
	}
	if p.Spawn != nil {
		out.Spawn = &kin.SpawnRules{Roles: slices.Clone(p.Spawn.Roles)}
		if p.Spawn.Allow != nil {
			out.Spawn.Allow = ptr(*p.Spawn.Allow)
		}
	}
	if p.Budget != nil {
		b := *p.Budget
		out.Budget = &kin.Budget{}
		minBudget(out.Budget, &b) // min with an empty budget is a deep copy
	}
	if p.Visibility != nil {
		out.Visibility = cloneVisibility(p.Visibility)
	}
	return out
}
