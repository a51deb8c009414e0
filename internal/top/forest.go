package top

import (
	"slices"
	"strings"

	"github.com/kin-agents/kin/internal/treetext"
	"github.com/kin-agents/kin/kin"
)

// forest is the agents shown, as trees: the tops (roots, or the --root
// agent) and each agent's children, by id.
type forest struct {
	agents   map[kin.AgentID]*kin.Agent
	children map[kin.AgentID][]kin.AgentID
	tops     []kin.AgentID
	// order is every agent shown, depth first in id order, collapsed or
	// not: the order search walks.
	order []kin.AgentID
	// below is each agent's number of descendants.
	below map[kin.AgentID]int
}

// newForest builds the forest of list: with root 0 every agent whose parent
// is not in the list (a root, or for an agent caller its own top) heads a
// tree; otherwise only root's subtree is kept.
func newForest(list []*kin.Agent, root kin.AgentID) *forest {
	f := &forest{
		agents:   make(map[kin.AgentID]*kin.Agent, len(list)),
		children: map[kin.AgentID][]kin.AgentID{},
		below:    make(map[kin.AgentID]int, len(list)),
	}
	for _, a := range list {
		f.agents[a.ID] = a
	}
	for _, a := range list {
		if _, ok := f.agents[a.Parent]; ok && a.Parent != a.ID {
			f.children[a.Parent] = append(f.children[a.Parent], a.ID)
		} else if root == 0 {
			f.tops = append(f.tops, a.ID)
		}
	}
	if root != 0 {
		if _, ok := f.agents[root]; ok {
			f.tops = []kin.AgentID{root}
		}
	}
	for _, kids := range f.children {
		slices.Sort(kids)
	}
	slices.Sort(f.tops)
	f.order = make([]kin.AgentID, 0, len(list))
	seen := make(map[kin.AgentID]bool, len(list))
	var walk func(id kin.AgentID) int
	walk = func(id kin.AgentID) int {
		if seen[id] { // a corrupt parent chain must not loop
			return 0
		}
		seen[id] = true
		f.order = append(f.order, id)
		n := 0
		for _, c := range f.children[id] {
			n += 1 + walk(c)
		}
		f.below[id] = n
		return n
	}
	for _, id := range f.tops {
		walk(id)
	}
	if root != 0 { // drop what is not under root
		for id := range f.agents {
			if !seen[id] {
				delete(f.agents, id)
				delete(f.children, id)
			}
		}
	}
	return f
}

// row is one line of the tree on screen.
type row struct {
	id     kin.AgentID
	prefix string // the tree glyphs before the agent: "│   ├── "
	hidden int    // descendants folded away under it (0: expanded or a leaf)
}

// rows flattens the forest into the lines on screen, leaving out what is
// under a collapsed agent.
func (f *forest) rows(collapsed map[kin.AgentID]bool) []row {
	out := make([]row, 0, len(f.order))
	treetext.Walk(f.tops, func(id kin.AgentID, prefix string) []kin.AgentID {
		r := row{id: id, prefix: prefix}
		kids := f.children[id]
		if collapsed[id] && len(kids) > 0 {
			r.hidden, kids = f.below[id], nil
		}
		out = append(out, r)
		return kids
	})
	return out
}

// ancestors returns id's ancestors in the forest, its parent first.
func (f *forest) ancestors(id kin.AgentID) []kin.AgentID {
	var out []kin.AgentID
	for a := f.agents[id]; a != nil; {
		p, ok := f.agents[a.Parent]
		if !ok || slices.Contains(out, p.ID) || p.ID == id {
			break
		}
		out = append(out, p.ID)
		a = p
	}
	return out
}

// descendants calls fn for every descendant of id, depth first; with
// ownedOnly it skips detached descendants and their subtrees (they survive
// a stop).
func (f *forest) descendants(id kin.AgentID, ownedOnly bool, fn func(*kin.Agent)) {
	for _, c := range f.children[id] {
		a := f.agents[c]
		if ownedOnly && a.Life == kin.LifeDetached {
			continue
		}
		fn(a)
		f.descendants(c, ownedOnly, fn)
	}
}

// match returns the first agent after from (in order, wrapping around)
// whose name contains query, ignoring case.
func (f *forest) match(query string, from kin.AgentID) (kin.AgentID, bool) {
	if query == "" || len(f.order) == 0 {
		return 0, false
	}
	q := strings.ToLower(query)
	start := slices.Index(f.order, from) // -1: start at the top
	for i := 1; i <= len(f.order); i++ {
		id := f.order[(start+i+len(f.order))%len(f.order)]
		if strings.Contains(strings.ToLower(f.agents[id].Name), q) {
			return id, true
		}
	}
	return 0, false
}
