package policy

import (
	"errors"
	"math/bits"
	"slices"
)

// Tool and env patterns are globs over names: '*' matches any run of bytes
// (including none), '?' exactly one byte, every other byte itself. The
// language is small on purpose: with only these two wildcards, "does the
// child ask for more than the parent allows" has an exact answer (an NFA
// product), so kin never has to guess.
//
// Names are never empty: the empty name is outside every question asked
// here (a pattern "*" is not said to ask for the tool "").

// ErrTooComplex is returned when comparing patterns would need more work
// than the search's bounds allow. Subset constructions can blow up exponentially
// ("*a" followed by many '?'); callers treat the answer as "not proved
// within", which refuses rather than grants.
var ErrTooComplex = errors.New("the patterns are too complex to compare; use fewer wildcards")

// A search is bounded by DFA states, and by states times symbols times
// bitset words (the cost of computing them). Realistic tool lists stay far
// below both; the bounds make an adversarial pattern cost a refusal (in
// tens of milliseconds), not the daemon's CPU or memory.
const (
	maxGlobStates = 1 << 14
	maxGlobWork   = 1 << 22
)

// MatchTool reports whether name matches pattern: the greedy match that
// backtracks only to the last '*', so at worst len(pattern)*len(name)
// steps, never exponential.
func MatchTool(pattern, name string) bool {
	p, n := 0, 0
	star, mark := -1, 0
	for n < len(name) {
		switch {
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, n
			p++
		case p < len(pattern) && (pattern[p] == '?' || pattern[p] == name[n]):
			p++
			n++
		case star >= 0:
			mark++
			p, n = star+1, mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// matchAny reports whether name matches one of patterns.
func matchAny(patterns []string, name string) bool {
	return slices.ContainsFunc(patterns, func(p string) bool { return MatchTool(p, name) })
}

// Subset reports whether every non-empty name that p matches is matched by
// one of of. When it is not, witness is a shortest name that p matches and
// none of of does.
func Subset(p string, of []string) (ok bool, witness string, err error) {
	pats := append([]string{p}, of...)
	w, found, err := search(pats, func(acc []bool) bool {
		return acc[0] && !slices.Contains(acc[1:], true)
	})
	return !found && err == nil, w, err
}

// Intersect reports whether some non-empty name matches both p and q, and
// returns a shortest one.
func Intersect(p, q string) (ok bool, witness string, err error) {
	w, found, err := search([]string{p, q}, func(acc []bool) bool { return acc[0] && acc[1] })
	return found, w, err
}

// search explores the product of the patterns' NFAs by subset construction,
// breadth first, and returns the shortest non-empty name whose acceptance
// vector (acc[i]: pattern i matches the name) satisfies pred.
//
// Names are read over a finite alphabet: every byte that occurs literally in
// a pattern, plus one representative of all other bytes, which no pattern
// can tell apart. So the search is exact for names over all 256 bytes.
func search(pats []string, pred func(acc []bool) bool) (witness string, found bool, err error) {
	a := newAutomaton(pats)
	words := (a.n + 63) / 64
	budget := min(maxGlobStates, maxGlobWork/max(1, len(a.syms)*words))

	type node struct {
		parent int32
		sym    byte
	}
	start := make([]uint64, words)
	for i := range pats {
		a.addClosure(start, i, 0)
	}
	states := [][]uint64{start}
	nodes := []node{{parent: -1}}
	// The start (the empty name, never an answer) is not indexed: a
	// non-empty name reaching the same NFA states must still be a node.
	index := map[string]int32{}
	acc := make([]bool, len(pats))
	next := make([]uint64, words)

	for cur := 0; cur < len(states); cur++ {
		if cur > 0 {
			a.accepting(states[cur], acc)
			if pred(acc) {
				var b []byte
				for i := int32(cur); i > 0; i = nodes[i].parent {
					b = append(b, nodes[i].sym)
				}
				slices.Reverse(b)
				return string(b), true, nil
			}
		}
		for _, s := range a.syms {
			clear(next)
			a.step(states[cur], next, s)
			k := key(next)
			if _, seen := index[k]; seen {
				continue
			}
			if len(states) >= budget {
				return "", false, ErrTooComplex
			}
			index[k] = int32(len(states))
			states = append(states, slices.Clone(next))
			nodes = append(nodes, node{parent: int32(cur), sym: s})
		}
	}
	return "", false, nil
}

// automaton is the NFAs of several patterns laid side by side in one
// bitset: pattern i owns the states off[i] .. off[i]+len(pats[i]), where
// state j means "the first j bytes of the pattern are matched".
type automaton struct {
	pats []string
	off  []int
	n    int
	syms []byte // one representative byte per symbol class
}

func newAutomaton(pats []string) *automaton {
	a := &automaton{pats: pats, off: make([]int, len(pats))}
	var lit [256]bool
	for i, p := range pats {
		a.off[i] = a.n
		a.n += len(p) + 1
		for j := 0; j < len(p); j++ {
			if p[j] != '*' && p[j] != '?' {
				lit[p[j]] = true
			}
		}
	}
	for c := range 256 {
		if lit[c] {
			a.syms = append(a.syms, byte(c))
		}
	}
	if o, ok := otherByte(&lit); ok {
		a.syms = append(a.syms, o)
	}
	return a
}

// otherByte picks the representative of the bytes no pattern names,
// preferring one that reads well in a witness ("web_x").
func otherByte(lit *[256]bool) (byte, bool) {
	const preferred = "xyzqjkwvuthgfedcbaponmlisr0123456789"
	for i := 0; i < len(preferred); i++ {
		if !lit[preferred[i]] {
			return preferred[i], true
		}
	}
	for c := range 256 {
		if !lit[c] {
			return byte(c), true
		}
	}
	return 0, false
}

// addClosure adds state j of pattern i and every state reachable from it
// by skipping '*' (which may match nothing).
func (a *automaton) addClosure(set []uint64, i, j int) {
	p := a.pats[i]
	for {
		b := a.off[i] + j
		set[b/64] |= 1 << (b % 64)
		if j >= len(p) || p[j] != '*' {
			return
		}
		j++
	}
}

// step adds to next the states reachable from cur on the byte c.
func (a *automaton) step(cur, next []uint64, c byte) {
	for i, p := range a.pats {
		lo, hi := a.off[i], a.off[i]+len(p)
		for b := lo; b <= hi; {
			w := cur[b/64] >> (b % 64)
			if w == 0 {
				b += 64 - b%64
				continue
			}
			b += bits.TrailingZeros64(w)
			if b > hi {
				break
			}
			j := b - lo
			if j < len(p) {
				switch p[j] {
				case '*':
					a.addClosure(next, i, j)
				case '?':
					a.addClosure(next, i, j+1)
				case c:
					a.addClosure(next, i, j+1)
				}
			}
			b++
		}
	}
}

// accepting fills acc with whether each pattern has reached its end.
func (a *automaton) accepting(set []uint64, acc []bool) {
	for i, p := range a.pats {
		b := a.off[i] + len(p)
		acc[i] = set[b/64]&(1<<(b%64)) != 0
	}
}

func key(set []uint64) string {
	b := make([]byte, 0, len(set)*8)
	for _, w := range set {
		for k := 0; k < 64; k += 8 {
			b = append(b, byte(w>>k))
		}
	}
	return string(b)
}
