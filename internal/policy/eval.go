package policy

import (
	"cmp"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kin-agents/kin/kin"
)

// describe names a layer the way a person would look for it.
func describe(l kin.PolicyLayer) string {
	switch l.Source {
	case kin.SourceGlobal:
		return "the global deny list"
	case kin.SourcePreset:
		return fmt.Sprintf("the stage preset %q of agent %d", l.Name, l.Agent)
	case kin.SourcePolicy:
		return fmt.Sprintf("the policy of agent %d", l.Agent)
	}
	return fmt.Sprintf("the %s layer of agent %d", l.Source, l.Agent)
}

// decision starts a Decision attributed to layer l.
func decision(l kin.PolicyLayer, allowed bool, rule, reason string) kin.Decision {
	d := kin.Decision{Allowed: allowed, Rule: rule, Reason: reason, Source: l.Source, Agent: l.Agent}
	if l.Source == kin.SourcePreset {
		d.Preset = l.Name
	}
	return d
}

func list(patterns []string) string { return "[" + strings.Join(patterns, " ") + "]" }

// joinAnd joins phrases as "a, b and c".
func joinAnd(items []string) string {
	if len(items) <= 1 {
		return strings.Join(items, "")
	}
	return strings.Join(items[:len(items)-1], ", ") + " and " + items[len(items)-1]
}

// toolStep is one layer's own verdict on a tool.
func toolStep(l kin.PolicyLayer, tool string) kin.Decision {
	t := l.Policy.Tools
	if t == nil {
		return decision(l, true, "", fmt.Sprintf("%s does not restrict tools", describe(l)))
	}
	for _, d := range t.Deny {
		if MatchTool(d, tool) {
			what := "the deny list of " + describe(l)
			if l.Source == kin.SourceGlobal {
				what = describe(l)
			}
			return decision(l, false, "deny "+d, fmt.Sprintf("tool %s is denied by %s (%s)", quote(tool), what, d))
		}
	}
	if t.Allow == nil {
		return decision(l, true, "", fmt.Sprintf("%s denies only %s", describe(l), list(t.Deny)))
	}
	for _, a := range t.Allow {
		if MatchTool(a, tool) {
			return decision(l, true, "allow "+a, fmt.Sprintf("%s allows it (%s)", describe(l), a))
		}
	}
	return decision(l, false, "not in allow "+list(t.Allow),
		fmt.Sprintf("tool %s is not in the allow list %s of %s", quote(tool), list(t.Allow), describe(l)))
}

// AllowTool decides whether tool may be used under layers: only if every
// layer allows it. The first Decision is the verdict, attributed to the
// first layer (from the global list down) that denies; the slice is every
// layer's own verdict, for kin explain.
func AllowTool(layers []kin.PolicyLayer, tool string) (kin.Decision, []kin.Decision) {
	if tool == "" {
		return kin.Decision{Reason: "a tool name is empty"}, nil
	}
	steps := make([]kin.Decision, len(layers))
	verdict := -1
	var by []string
	for i, l := range layers {
		steps[i] = toolStep(l, tool)
		if !steps[i].Allowed && verdict < 0 {
			verdict = i
		}
		if l.Policy.Tools != nil {
			by = append(by, describe(l))
		}
	}
	if verdict >= 0 {
		return steps[verdict], steps
	}
	if len(by) == 0 {
		return kin.Decision{Allowed: true, Reason: fmt.Sprintf("tool %s is allowed: no layer restricts tools", quote(tool))}, steps
	}
	return kin.Decision{Allowed: true, Reason: fmt.Sprintf("tool %s is allowed by %s", quote(tool), joinAnd(by))}, steps
}

// AllowModel decides whether model may be called through kin's model
// gateway under layers: only if every layer that lists models allows it
// (the tool rules' glob language over model names). A layer without
// models restricts nothing.
func AllowModel(layers []kin.PolicyLayer, model string) kin.Decision {
	if model == "" {
		return kin.Decision{Reason: "the request names no model"}
	}
	var by []string
	for _, l := range layers {
		m := l.Policy.Models
		if m == nil {
			continue
		}
		for _, d := range m.Deny {
			// Case aside: an upstream may read "GPT-4o" as "gpt-4o".
			if MatchTool(d, model) || MatchTool(strings.ToLower(d), strings.ToLower(model)) {
				return decision(l, false, "deny "+d, fmt.Sprintf("model %s is denied by the models.deny list of %s (%s)", quote(model), describe(l), d))
			}
		}
		if m.Allow == nil {
			continue
		}
		i := slices.IndexFunc(m.Allow, func(a string) bool { return MatchTool(a, model) })
		if i < 0 {
			return decision(l, false, "not in models.allow "+list(m.Allow),
				fmt.Sprintf("model %s is not in the models.allow list %s of %s", quote(model), list(m.Allow), describe(l)))
		}
		by = append(by, fmt.Sprintf("%s (%s)", describe(l), m.Allow[i]))
	}
	if len(by) == 0 {
		return kin.Decision{Allowed: true, Reason: fmt.Sprintf("model %s is allowed: no layer restricts models", quote(model))}
	}
	return kin.Decision{Allowed: true, Reason: fmt.Sprintf("model %s is allowed by %s", quote(model), joinAnd(by))}
}

// AllowEnv decides whether a spawner may pass the environment variable name
// down: every layer that lists env patterns must have one matching it.
func AllowEnv(layers []kin.PolicyLayer, name string) kin.Decision {
	if name == "" {
		return kin.Decision{Reason: "an environment variable name is empty"}
	}
	var by []string
	for _, l := range layers {
		if l.Policy.Env == nil {
			continue
		}
		i := slices.IndexFunc(l.Policy.Env, func(p string) bool { return MatchTool(p, name) })
		if i < 0 {
			return decision(l, false, "env "+list(l.Policy.Env),
				fmt.Sprintf("env %s is not in the env list %s of %s", quote(name), list(l.Policy.Env), describe(l)))
		}
		by = append(by, fmt.Sprintf("%s (%s)", describe(l), l.Policy.Env[i]))
	}
	if len(by) == 0 {
		return kin.Decision{Allowed: true, Reason: fmt.Sprintf("env %s is allowed: no layer restricts env", quote(name))}
	}
	return kin.Decision{Allowed: true, Reason: fmt.Sprintf("env %s is allowed by %s", quote(name), joinAnd(by))}
}

// under reports whether path is prefix or below it, component-wise: "/work"
// is a prefix of "/work/x" but not of "/workx".
func under(path, prefix string) bool {
	if prefix == "/" {
		return strings.HasPrefix(path, "/")
	}
	return path == prefix || strings.HasPrefix(path, prefix+"/")
}

// lookup returns the longest listed prefix of path in mounts.
func lookup(mounts map[string]kin.Mode, path string) (string, kin.Mode, bool) {
	best, found := "", false
	for k := range mounts {
		if under(path, k) && (!found || len(k) > len(best)) {
			best, found = k, true
		}
	}
	if !found {
		return "", kin.ModeHidden, false
	}
	return best, mounts[best], true
}

func rank(m kin.Mode) int { return max(m.Rank(), 0) }

func norm(m kin.Mode) kin.Mode {
	if m.Rank() < 0 {
		return kin.ModeHidden
	}
	return m
}

// checkPath refuses what is not a clean absolute path: mounts are compared
// as strings, so "/work/../etc" must never reach the comparison.
func checkPath(path string) error {
	switch {
	case path == "":
		return fmt.Errorf("the path is empty")
	case strings.IndexByte(path, 0) >= 0:
		return fmt.Errorf("path %s contains a NUL byte", quote(path))
	case !strings.HasPrefix(path, "/"):
		return fmt.Errorf("%s is not an absolute path", quote(path))
	case hasDotDot(path):
		return fmt.Errorf("path %s has a \"..\" component", quote(path))
	case filepath.Clean(path) != path:
		return fmt.Errorf("path %s is not clean (it would be %s)", quote(path), quote(filepath.Clean(path)))
	}
	return nil
}

func hasDotDot(p string) bool { return slices.Contains(strings.Split(p, "/"), "..") }

// pathStep is one layer's own mode for path.
func pathStep(l kin.PolicyLayer, path string) (kin.Mode, kin.Decision) {
	m := l.Policy.Mounts
	if m == nil {
		return kin.ModeRW, decision(l, true, "", fmt.Sprintf("%s does not restrict mounts", describe(l)))
	}
	k, mode, ok := lookup(m, path)
	if !ok {
		return kin.ModeHidden, decision(l, false, "",
			fmt.Sprintf("%q is hidden: it is under no mount of %s", path, describe(l)))
	}
	mode = norm(mode)
	return mode, decision(l, mode != kin.ModeHidden, k+" "+string(mode),
		fmt.Sprintf("%q is %s under the mount %q %s of %s", path, words(mode), k, mode, describe(l)))
}

func words(m kin.Mode) string {
	switch m {
	case kin.ModeRW:
		return "read-write"
	case kin.ModeRO:
		return "read-only"
	}
	return "hidden"
}

// PathMode returns the effective mode of a clean absolute path: the least
// visible of the layers' modes, each layer giving the mode of its longest
// listed prefix (hidden when it lists mounts but none covers the path, rw
// when it lists none). The Decision names the first layer, from the top,
// that sets that minimum.
func PathMode(layers []kin.PolicyLayer, path string) (kin.Mode, kin.Decision, []kin.Decision) {
	if err := checkPath(path); err != nil {
		return kin.ModeHidden, kin.Decision{Reason: err.Error()}, nil
	}
	steps := make([]kin.Decision, len(layers))
	mode, verdict := kin.ModeRW, -1
	for i, l := range layers {
		m, d := pathStep(l, path)
		steps[i] = d
		if l.Policy.Mounts != nil && (verdict < 0 || rank(m) < rank(mode)) {
			mode, verdict = m, i
		}
	}
	if verdict < 0 {
		return kin.ModeRW, kin.Decision{Allowed: true, Reason: fmt.Sprintf("%q is read-write: no layer restricts mounts", path)}, steps
	}
	return mode, steps[verdict], steps
}

// Flatten resolves layers into one policy: what Landlock, setgroups and
// rlimits enforce. Tools and Env stay nil: an intersection of glob lists is
// not one glob list, so they are always evaluated layer by layer.
//
//   - Mounts: every path any layer lists, with its effective mode, minus
//     entries their nearest listed ancestor already implies. nil when no
//     layer lists mounts (unrestricted); an empty non-nil map hides all.
//   - Groups: the intersection of the layers that list groups (nil if none).
//   - UID, GID: the last layer that sets them.
//   - Detach, Spawn.Allow: true only if every layer that sets them says true.
//   - Spawn.Roles: the intersection of the layers that list roles.
//   - Budget: each field the least of the layers that set it. Deadline too,
//     though each layer's deadline counts from its own agent's spawn: the
//     absolute one is EffectivePolicy.DeadlineAt, which the daemon keeps.
//   - Visibility: the last layer's, if it is a policy layer (the agent's
//     own; visibility is consent, it is not inherited).
//
// The result passes Validate when every layer does.
func Flatten(layers []kin.PolicyLayer) kin.Policy {
	var flat kin.Policy
	flat.Mounts = flattenMounts(layers)
	for _, l := range layers {
		p := l.Policy
		if p.Groups != nil {
			if flat.Groups == nil {
				flat.Groups = sortedSet(p.Groups)
			} else {
				flat.Groups = slices.DeleteFunc(flat.Groups, func(g uint32) bool { return !slices.Contains(p.Groups, g) })
			}
		}
		if p.UID != nil {
			flat.UID = ptr(*p.UID)
		}
		if p.GID != nil {
			flat.GID = ptr(*p.GID)
		}
		if p.Detach != nil {
			flat.Detach = ptr(*p.Detach && (flat.Detach == nil || *flat.Detach))
		}
		if p.Spawn != nil {
			if flat.Spawn == nil {
				flat.Spawn = &kin.SpawnRules{}
			}
			if a := p.Spawn.Allow; a != nil {
				flat.Spawn.Allow = ptr(*a && (flat.Spawn.Allow == nil || *flat.Spawn.Allow))
			}
			if r := p.Spawn.Roles; r != nil {
				if flat.Spawn.Roles == nil {
					flat.Spawn.Roles = sortedSet(r)
				} else {
					flat.Spawn.Roles = slices.DeleteFunc(flat.Spawn.Roles, func(x string) bool { return !slices.Contains(r, x) })
				}
			}
		}
		if p.Budget != nil {
			if flat.Budget == nil {
				flat.Budget = &kin.Budget{}
			}
			minBudget(flat.Budget, p.Budget)
		}
	}
	if n := len(layers); n > 0 && layers[n-1].Source == kin.SourcePolicy && layers[n-1].Policy.Visibility != nil {
		flat.Visibility = cloneVisibility(layers[n-1].Policy.Visibility)
	}
	return flat
}

// flattenMounts computes the effective mode at every listed path. The
// layers' combined mode is constant between listed paths: at any path it
// is the mode at its longest listed prefix (in the union of all layers),
// and hidden where no listed path covers it. So one entry per listed path
// is exact, and an entry equal to what its nearest kept ancestor gives
// can go.
func flattenMounts(layers []kin.PolicyLayer) map[string]kin.Mode {
	var paths []string
	restricted := false
	for _, l := range layers {
		if l.Policy.Mounts != nil {
			restricted = true
			paths = slices.AppendSeq(paths, maps.Keys(l.Policy.Mounts))
		}
	}
	if !restricted {
		return nil
	}
	// Shorter first, so a path's ancestors are decided before it.
	slices.SortFunc(paths, func(a, b string) int { return cmp.Or(cmp.Compare(len(a), len(b)), strings.Compare(a, b)) })
	paths = slices.Compact(paths)
	out := map[string]kin.Mode{}
	for _, p := range paths {
		if checkPath(p) != nil {
			continue // Validate refuses these; unreachable for valid layers
		}
		m, _, _ := PathMode(layers, p)
		if _, inherited, _ := lookup(out, p); inherited != m {
			out[p] = m
		}
	}
	return out
}

func minBudget(dst, b *kin.Budget) {
	dst.Deadline = minPtr(dst.Deadline, b.Deadline)
	dst.MaxDescendants = minPtr(dst.MaxDescendants, b.MaxDescendants)
	dst.MaxTokens = minPtr(dst.MaxTokens, b.MaxTokens)
	dst.MaxCost = minPtr(dst.MaxCost, b.MaxCost)
	dst.CPUSeconds = minPtr(dst.CPUSeconds, b.CPUSeconds)
	dst.MemoryBytes = minPtr(dst.MemoryBytes, b.MemoryBytes)
	dst.OpenFiles = minPtr(dst.OpenFiles, b.OpenFiles)
	dst.Pids = minPtr(dst.Pids, b.Pids)
	dst.Memory = minPtr(dst.Memory, b.Memory)
	dst.CPU = minPtr(dst.CPU, b.CPU)
}

// minPtr is the lesser of two optional limits, nil meaning unlimited. It
// always returns a fresh pointer so a flattened policy never aliases a layer.
func minPtr[T cmp.Ordered](a, b *T) *T {
	switch {
	case a == nil && b == nil:
		return nil
	case a == nil:
		return ptr(*b)
	case b == nil:
		return ptr(*a)
	}
	return ptr(min(*a, *b))
}

func ptr[T any](v T) *T { return &v }

func sortedSet[T cmp.Ordered](s []T) []T {
	out := slices.Clone(s)
	if out == nil {
		out = []T{}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func cloneVisibility(v *kin.Visibility) *kin.Visibility {
	return &kin.Visibility{ReadFrom: slices.Clone(v.ReadFrom), ReadableTo: slices.Clone(v.ReadableTo), Scope: slices.Clone(v.Scope)}
}

// Landlock returns the trees Landlock must grant read-write and read-only,
// sorted, from a flattened policy. Both are nil when flat.Mounts is nil
// (nothing to restrict); when mounts are restricted they are non-nil, and
// both empty means every path is hidden. Test flat.Mounts == nil, never the
// lengths, to decide whether to restrict. flat must pass Validate (Flatten
// of valid layers does): a hidden path inside a granted tree could not be
// enforced.
func Landlock(flat kin.Policy) (rw, ro []string) {
	if flat.Mounts == nil {
		return nil, nil
	}
	rw, ro = []string{}, []string{}
	for p, m := range flat.Mounts {
		switch m {
		case kin.ModeRW:
			rw = append(rw, p)
		case kin.ModeRO:
			ro = append(ro, p)
		}
	}
	slices.Sort(rw)
	slices.Sort(ro)
	return rw, ro
}
