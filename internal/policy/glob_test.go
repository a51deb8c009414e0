package policy

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestMatchTool(t *testing.T) {
	tests := []struct {
		pattern, name string
		want          bool
	}{
		{"read", "read", true},
		{"read", "reads", false},
		{"read", "rea", false},
		{"*", "exec", true},
		{"web_*", "web_search", true},
		{"web_*", "web_", true},
		{"web_*", "web", false},
		{"web_*", "xweb_search", false},
		{"*_get", "memory_get", true},
		{"*_get", "memory_gets", false},
		{"memory_?et", "memory_get", true},
		{"memory_?et", "memory_et", false},
		{"a*b*c", "aXbYc", true},
		{"a*b*c", "abc", true},
		{"a*b*c", "acb", false},
		{"a**b", "ab", true},
		{"?", "", false},
		{"*", "", true},
		{"[ab]", "a", false}, // '[' is no class: it is itself
		{"[ab]", "[ab]", true},
		{"mcp__*__read", "mcp__github__read", true},
		{"*a*a*a*a*b", strings.Repeat("a", 60), false},
	}
	for _, tt := range tests {
		if got := MatchTool(tt.pattern, tt.name); got != tt.want {
			t.Errorf("MatchTool(%q, %q) = %v, want %v", tt.pattern, tt.name, got, tt.want)
		}
	}
}

// names returns every string of length 1..n over alphabet.
func allNames(alphabet string, n int) []string {
	out := []string{}
	level := []string{""}
	for range n {
		var next []string
		for _, s := range level {
			for i := 0; i < len(alphabet); i++ {
				next = append(next, s+alphabet[i:i+1])
			}
		}
		out = append(out, next...)
		level = next
	}
	return out
}

// allPatterns returns every pattern of length 1..n over alphabet.
func allPatterns(alphabet string, n int) []string { return allNames(alphabet, n) }

// The exact algorithms against brute force: every pattern up to length 3
// over {a, b, *, ?}, every name up to length 6 over {a, b, c} ('c' stands
// for the bytes no pattern names). A witness must be a real one, and the
// shortest, so its length must equal brute force's shortest when that one
// is within reach.
func TestSubsetAndIntersectAgainstBruteForce(t *testing.T) {
	const maxLen = 6
	pats := allPatterns("ab*?", 3)
	names := allNames("abc", maxLen) // sorted by length
	matches := map[string][]bool{}
	for _, p := range pats {
		m := make([]bool, len(names))
		for i, n := range names {
			m[i] = MatchTool(p, n)
		}
		matches[p] = m
	}
	// check compares an answer (found: a witness was returned) with brute
	// force's shortest counterexample (an index into names, or -1).
	check := func(what string, found bool, w string, err error, shortest int, valid func(string) bool) {
		t.Helper()
		switch {
		case err != nil:
			t.Fatalf("%s: %v", what, err)
		case shortest >= 0 && !found:
			t.Fatalf("%s: found nothing, but brute force found %q", what, names[shortest])
		case found && !valid(w):
			t.Fatalf("%s: %q is not a witness", what, w)
		case found && shortest >= 0 && len(w) != len(names[shortest]):
			t.Fatalf("%s: witness %q is not shortest; brute force found %q", what, w, names[shortest])
		case found && shortest < 0 && len(w) <= maxLen:
			t.Fatalf("%s: witness %q is within reach, but brute force found none", what, w)
		}
	}
	for _, p := range pats {
		for _, q := range pats {
			// Intersect: want is "no common name"; a found name is the witness.
			shortest := -1
			for i := range names {
				if matches[p][i] && matches[q][i] {
					shortest = i
					break
				}
			}
			ok, w, err := Intersect(p, q)
			check(fmt.Sprintf("Intersect(%q, %q)", p, q), ok, w, err, shortest,
				func(w string) bool { return MatchTool(p, w) && MatchTool(q, w) })

			shortest = -1
			for i := range names {
				if matches[p][i] && !matches[q][i] {
					shortest = i
					break
				}
			}
			ok, w, err = Subset(p, []string{q})
			check(fmt.Sprintf("Subset(%q, [%q])", p, q), !ok, w, err, shortest,
				func(w string) bool { return MatchTool(p, w) && !MatchTool(q, w) })
		}
	}
	// Subset against unions of two patterns, on a deterministic sample.
	for i, p := range pats {
		for j := i % 7; j < len(pats); j += 7 {
			q, r := pats[j], pats[(j*31+i)%len(pats)]
			shortest := -1
			for k := range names {
				if matches[p][k] && !matches[q][k] && !matches[r][k] {
					shortest = k
					break
				}
			}
			ok, w, err := Subset(p, []string{q, r})
			check(fmt.Sprintf("Subset(%q, [%q %q])", p, q, r), !ok, w, err, shortest,
				func(w string) bool { return MatchTool(p, w) && !MatchTool(q, w) && !MatchTool(r, w) })
		}
	}
}

func TestSubsetExamples(t *testing.T) {
	tests := []struct {
		p       string
		of      []string
		ok      bool
		witness string
	}{
		{"web_*", []string{"web_*"}, true, ""},
		{"web_search", []string{"web_*"}, true, ""},
		{"web_*", []string{"web_search", "web_fetch"}, false, "web_"},
		{"*", []string{"read"}, false, "a"},
		{"*", []string{"*"}, true, ""},
		{"*", []string{"?*"}, true, ""}, // names are never empty
		{"a*", []string{"a?*", "a"}, true, ""},
		{"?", []string{"a", "b"}, false, "x"}, // a byte no pattern names
		{"exec", nil, false, "exec"},
	}
	for _, tt := range tests {
		ok, w, err := Subset(tt.p, tt.of)
		if err != nil || ok != tt.ok || w != tt.witness {
			t.Errorf("Subset(%q, %q) = %v, %q, %v; want %v, %q", tt.p, tt.of, ok, w, err, tt.ok, tt.witness)
		}
	}
}

// A pattern whose automaton explodes is refused quickly, not computed.
func TestSubsetTooComplex(t *testing.T) {
	start := time.Now()
	_, _, err := Subset("*a"+strings.Repeat("?", 100), []string{"b*"})
	if !errors.Is(err, ErrTooComplex) {
		t.Fatalf("err = %v, want ErrTooComplex", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("refusing took %v", d)
	}
	// Realistic lists are nowhere near the bound.
	var many []string
	for i := range 200 {
		many = append(many, fmt.Sprintf("mcp__server%d__*", i))
	}
	if ok, _, err := Subset("mcp__server7__read", many); err != nil || !ok {
		t.Errorf("Subset over 200 server patterns = %v, %v", ok, err)
	}
	if ok, w, err := Subset("*", slices.Concat(many, []string{"read", "*_search"})); err != nil || ok {
		t.Errorf("Subset(*, ...) = %v, %q, %v", ok, w, err)
	}
}
