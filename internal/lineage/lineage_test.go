package lineage

import (
	"fmt"
	"testing"

	"github.com/kin-agents/kin/kin"
)

func TestLineageSubtreeAndDescendants(t *testing.T) {
	var l Tree
	// seed 000: 1 -> 2,3,4; 2 -> 5,6; 3 -> 7; 8 is another root
	for _, link := range [][2]kin.AgentID{{1, 0}, {2, 1}, {3, 1}, {4, 1}, {5, 2}, {6, 2}, {7, 3}, {8, 0}} {
		l.Add(link[0], link[1])
	}
	for _, tt := range []struct {
		id   kin.AgentID
		want string
	}{
		{1, "[1 2 3 4 5 6 7]"},
		{2, "[2 5 6]"},
		{7, "[7]"},
		{8, "[8]"},
		{9, "[]"},
		{0, "[]"},
	} {
		if got := fmt.Sprint(l.Subtree(tt.id)); got != tt.want {
			t.Errorf("subtree(%d) = %s, want %s", tt.id, got, tt.want)
		}
	}
	if !l.IsDescendant(7, 1) || !l.IsDescendant(5, 2) || l.IsDescendant(5, 3) || l.IsDescendant(1, 1) || l.IsDescendant(8, 1) || l.IsDescendant(99, 1) {
		t.Error("isDescendant is wrong")
	}
	if !l.Has(8) || l.Has(9) || l.Has(0) {
		t.Error("Has is wrong")
	}
	if got := fmt.Sprint(l.Chain(6)); got != "[6 2 1]" {
		t.Errorf("Chain(6) = %s", got)
	}
	if l.Root(6) != 1 || l.Root(1) != 1 || l.Root(9) != 0 {
		t.Errorf("Root(6), Root(1), Root(9) = %d %d %d; want 1 1 0", l.Root(6), l.Root(1), l.Root(9))
	}
	if l.Chain(9) != nil || l.Parent(5) != 2 || l.Parent(8) != 0 || l.Len() != 8 {
		t.Error("Chain, Parent or Len is wrong")
	}
}

// TestChainVia: an escalated agent's chain goes on through its asker
// (seed 002 §4.1), one walk; a loop in what via answers ends the walk.
func TestChainVia(t *testing.T) {
	var l Tree
	// 1 -> 2,3; 2 -> 4; 3 -> 5; 5 asked for by 4 (its chain: 5 4 2 1).
	for _, link := range [][2]kin.AgentID{{1, 0}, {2, 1}, {3, 1}, {4, 2}, {5, 3}} {
		l.Add(link[0], link[1])
	}
	via := map[kin.AgentID]kin.AgentID{5: 4}
	of := func(a kin.AgentID) kin.AgentID { return via[a] }
	for _, tt := range []struct {
		id   kin.AgentID
		want string
	}{{5, "[5 4 2 1]"}, {4, "[4 2 1]"}, {3, "[3 1]"}, {9, "[]"}} {
		if got := fmt.Sprint(l.ChainVia(tt.id, of)); got != tt.want {
			t.Errorf("ChainVia(%d) = %s, want %s", tt.id, got, tt.want)
		}
	}
	if got := fmt.Sprint(l.ChainVia(5, func(kin.AgentID) kin.AgentID { return 0 })); got != fmt.Sprint(l.Chain(5)) {
		t.Errorf("ChainVia without escalations = %s, want Chain's %v", got, l.Chain(5))
	}
	via[2] = 5 // a loop: 5 -> 4 -> 2 -> 5
	if got := l.ChainVia(5, of); len(got) != l.Len()+1 {
		t.Errorf("ChainVia through a loop = %v, want it cut at %d links", got, l.Len()+1)
	}
}

// TestLinksArriveInAnyOrder: in a fleet this daemon learns of other hosts'
// agents after its own later ones, and may learn of a child before its
// parent. Children stay in id order, a child that came first is linked when
// its parent comes, and adding an agent twice changes nothing.
func TestLinksArriveInAnyOrder(t *testing.T) {
	var l, want Tree
	links := [][2]kin.AgentID{{1, 0}, {2, 1}, {3, 1}, {4, 1}, {5, 2}, {6, 2}, {7, 3}, {8, 0}, {9, 1}}
	for _, link := range links {
		want.Add(link[0], link[1])
	}
	for _, i := range []int{0, 8, 3, 1, 6, 5, 4, 7, 2, 3, 0} {
		l.Add(links[i][0], links[i][1])
	}
	for id := kin.AgentID(0); id <= 10; id++ {
		if got, w := fmt.Sprint(l.Subtree(id)), fmt.Sprint(want.Subtree(id)); got != w {
			t.Errorf("subtree(%d) = %s, want %s", id, got, w)
		}
	}
	// A child before its parent; and a gap: 11 is not known though 12 is.
	var o Tree
	o.Add(12, 10)
	if o.Has(11) || o.Has(10) || !o.Has(12) || fmt.Sprint(o.Subtree(12)) != "[12]" {
		t.Fatalf("before its parent: has(10)=%v has(11)=%v subtree(12)=%v", o.Has(10), o.Has(11), o.Subtree(12))
	}
	o.Add(10, 0)
	if fmt.Sprint(o.Subtree(10)) != "[10 12]" || fmt.Sprint(o.Chain(12)) != "[12 10]" || !o.IsDescendant(12, 10) {
		t.Fatalf("after its parent: subtree(10)=%v chain(12)=%v", o.Subtree(10), o.Chain(12))
	}
}

// TestAllInIDOrder: All is every agent added, in ascending id order,
// whatever the order they arrived in, and nothing else.
func TestAllInIDOrder(t *testing.T) {
	var l Tree
	if got := l.All(); len(got) != 0 {
		t.Fatalf("empty tree: %v", got)
	}
	for _, link := range [][2]kin.AgentID{{7, 3}, {3, 0}, {1, 0}, {9, 7}, {3, 1}} {
		l.Add(link[0], link[1])
	}
	if got := fmt.Sprint(l.All()); got != "[1 3 7 9]" {
		t.Fatalf("All = %s, want [1 3 7 9]", got)
	}
}
