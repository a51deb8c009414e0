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
// a link after each registration commits (this daemon's, and, in a fleet,
// those other hosts commit, as this daemon learns of them). Walking a
// 10,000-agent subtree here takes well under a millisecond, where SQLite's
// recursive query takes tens of milliseconds; the rows themselves are then
// read by id.
//
// Agent ids are dense (1, 2, 3, ...), so the links are slices indexed by id:
// 33 bytes an agent, 3.3 MB for 100,000. In a fleet they may arrive out of
// order (another host's agent 6 after this host's 7), and a child before
// its parent: Add keeps each agent's children in id order whatever the
// order of arrival, and links a child that came first once its parent
// comes.
type Tree struct {
	mu          sync.RWMutex
	parent      []kin.AgentID // parent[id]; index 0 unused
	firstChild  []kin.AgentID
	lastChild   []kin.AgentID
	nextSibling []kin.AgentID
	known       []bool                        // known[id]: added
	orphans     map[kin.AgentID][]kin.AgentID // children added before their parent, by parent
}

// Add records that id is a child of parent (0 for a root). Adding a known
// id again changes nothing.
func (l *Tree) Add(id, parent kin.AgentID) {
	if id <= 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for kin.AgentID(len(l.parent)) <= id {
		l.parent = append(l.parent, 0)
		l.firstChild = append(l.firstChild, 0)
		l.lastChild = append(l.lastChild, 0)
		l.nextSibling = append(l.nextSibling, 0)
		l.known = append(l.known, false)
	}
	if l.known[id] {
		return
	}
	l.known[id], l.parent[id] = true, parent
	if parent != 0 {
		if l.hasLocked(parent) {
			l.link(parent, id)
		} else {
			if l.orphans == nil {
				l.orphans = map[kin.AgentID][]kin.AgentID{}
			}
			l.orphans[parent] = append(l.orphans[parent], id)
		}
	}
	if kids, ok := l.orphans[id]; ok {
		delete(l.orphans, id)
		for _, c := range kids {
			l.link(id, c)
		}
	}
}

// link puts child among parent's children, in id order: at the end in the
// usual case (ids grow), else where it belongs.
func (l *Tree) link(parent, child kin.AgentID) {
	last := l.lastChild[parent]
	if last == 0 || last < child {
		if last != 0 {
			l.nextSibling[last] = child
		} else {
			l.firstChild[parent] = child
		}
		l.lastChild[parent] = child
		return
	}
	if first := l.firstChild[parent]; child < first {
		l.nextSibling[child], l.firstChild[parent] = first, child
		return
	}
	prev := l.firstChild[parent]
	for next := l.nextSibling[prev]; next != 0 && next < child; next = l.nextSibling[prev] {
		prev = next
	}
	l.nextSibling[child], l.nextSibling[prev] = l.nextSibling[prev], child
}

// Has reports whether id is a known agent.
func (l *Tree) Has(id kin.AgentID) bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.hasLocked(id)
}

func (l *Tree) hasLocked(id kin.AgentID) bool {
	return id > 0 && id < kin.AgentID(len(l.parent)) && l.known[id]
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

// All returns every known agent, in ascending id order.
func (l *Tree) All() []kin.AgentID {
	l.mu.RLock()
	defer l.mu.RUnlock()
	out := make([]kin.AgentID, 0, len(l.known))
	for id, ok := range l.known {
		if ok {
			out = append(out, kin.AgentID(id))
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
func (l *Tree) Chain(id kin.AgentID) []kin.AgentID { return l.ChainVia(id, nil) }

// ChainVia is Chain where an agent's next link may be another agent
// than its parent: via(a) when not 0 (an escalated spawn's asker), else
// a's parent (nil: the parents only). One walk under the lock, via called
// under it (it must not call the Tree); at most Len()+1 links, so a loop
// in what via answers ends the walk rather than hanging it.
func (l *Tree) ChainVia(id kin.AgentID, via func(kin.AgentID) kin.AgentID) []kin.AgentID {
	l.mu.RLock()
	defer l.mu.RUnlock()
	var out []kin.AgentID
	for a := id; a != 0 && l.hasLocked(a) && len(out) < len(l.parent); {
		out = append(out, a)
		var v kin.AgentID
		if via != nil {
			v = via(a)
		}
		if v != 0 {
			a = v
		} else {
			a = l.parent[a]
		}
	}
	return out
}

// Root is the root of id's tree (id itself for a root); 0 for an unknown
// id. One walk under the lock, without Chain's slice.
func (l *Tree) Root(id kin.AgentID) kin.AgentID {
	l.mu.RLock()
	defer l.mu.RUnlock()
	root := kin.AgentID(0)
	for a := id; a != 0 && l.hasLocked(a); a = l.parent[a] {
		root = a
	}
	return root
}

// Len is the number of agents known: the largest id.
func (l *Tree) Len() int {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return max(len(l.parent)-1, 0)
}
