// Package lineage is the family tree in memory: who is whose parent, and
// each agent's children in id order, as a cache of the store's links (the
// store stays the truth: a link is added only after its registration
// committed, and Load rebuilds the tree from the store's links).
//
// It must never decide anything: it answers who descends from whom.
package lineage

import (
	"sync"

	"github.com/kin-agents/kin/kin"
)

// Tree is the family tree in memory. It loads the links at start and adds
// a link after each registration commits. Walking a 10,000-agent subtree here
// takes well under a millisecond, where SQLite's recursive query takes
// tens of milliseconds; the rows themselves are then read by id.
//
// Agent ids are dense (1, 2, 3, ...), so the links are slices indexed by id:
// 32 bytes an agent, 3.2 MB for 100,000.
type Tree struct {
	mu          sync.RWMutex
	parent      []kin.AgentID // parent[id]; index 0 unused
	firstChild  []kin.AgentID
	lastChild   []kin.AgentID
	nextSibling []kin.AgentID
}

// Add records that id is a child of parent (0 for a root). Links arrive in
// id order, at start and after each commit.
func (l *Tree) Add(id, parent kin.AgentID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for kin.AgentID(len(l.parent)) <= id {
		l.parent = append(l.parent, 0)
		l.firstChild = append(l.firstChild, 0)
		l.lastChild = append(l.lastChild, 0)
		l.nextSibling = append(l.nextSibling, 0)
	}
	l.parent[id] = parent
	if parent == 0 || parent >= kin.AgentID(len(l.parent)) {
		return
	}
	if last := l.lastChild[parent]; last != 0 {
		l.nextSibling[last] = id
	} else {
		l.firstChild[parent] = id
	}
	l.lastChild[parent] = id
}

// Has reports whether id is a known agent.
func (l *Tree) Has(id kin.AgentID) bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.hasLocked(id)
}

func (l *Tree) hasLocked(id kin.AgentID) bool {
	// Every known id except roots has a parent; roots are known if any
	// later id exists or they are the last one added. Ids are dense, so
	// anything below the length was added.
	return id > 0 && id < kin.AgentID(len(l.parent))
}

// Subtree returns id and all its descendants, breadth first: each parent
// before its children, siblings in id order. It returns nil for an unknown id.
func (l *Tree) Subtree(id kin.AgentID) []kin.AgentID {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if !l.hasLocked(id) {
		return nil
	}
	out := []kin.AgentID{id}
	for i := 0; i < len(out); i++ {
		for c := l.firstChild[out[i]]; c != 0; c = l.nextSibling[c] {
			out = append(out, c)
		}
	}
	return out
}

// IsDescendant reports whether id is a strict descendant of ancestor.
func (l *Tree) IsDescendant(id, ancestor kin.AgentID) bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if !l.hasLocked(id) {
		return false
	}
	for p := l.parent[id]; p != 0; p = l.parent[p] {
		if p == ancestor {
			return true
		}
	}
	return false
}

// Parent returns id's parent, 0 for a root or an unknown id.
func (l *Tree) Parent(id kin.AgentID) kin.AgentID {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if !l.hasLocked(id) {
		return 0
	}
	return l.parent[id]
}

// Chain is id and its ancestors, id first; nil for an unknown id.
func (l *Tree) Chain(id kin.AgentID) []kin.AgentID {
	l.mu.RLock()
	defer l.mu.RUnlock()
	var out []kin.AgentID
	for a := id; a != 0 && l.hasLocked(a); a = l.parent[a] {
		out = append(out, a)
	}
	return out
}

// Len is the number of agents known: the largest id.
func (l *Tree) Len() int {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return max(len(l.parent)-1, 0)
}
