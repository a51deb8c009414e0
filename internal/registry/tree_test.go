package registry

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/kin-agents/kin/kin"
)

// BuildTree nests agents listed parents first; with root 0 every agent whose
// parent is not listed is a root, and a subtree's root is a root even when
// its parent is listed.
func TestBuildTreeNestsByParent(t *testing.T) {
	agents := []*kin.Agent{{ID: 1}, {ID: 2, Parent: 1}, {ID: 3, Parent: 1}, {ID: 4, Parent: 2}, {ID: 5, Parent: 9}}
	forest := BuildTree(agents, 0)
	if len(forest) != 2 || forest[0].ID != 1 || forest[1].ID != 5 {
		t.Fatalf("roots = %+v", forest)
	}
	one := forest[0]
	if len(one.Children) != 2 || one.Children[0].ID != 2 || one.Children[1].ID != 3 || len(one.Children[0].Children) != 1 || one.Children[0].Children[0].ID != 4 {
		t.Fatalf("agent 1's tree = %+v", one)
	}
	sub := BuildTree(agents[1:4], 2)
	if len(sub) != 2 || sub[0].ID != 2 || len(sub[0].Children) != 1 {
		t.Fatalf("the subtree at 2 = %+v (3 is not under 2: a root of its own)", sub)
	}
	if got := BuildTree(nil, 0); got == nil || len(got) != 0 {
		t.Fatalf("no agents: %v, want an empty forest, not nil", got)
	}
}

// TestBuildTree: agents (each parent before its children) nest under their
// parents, children in the order listed; the root asked for, or with root
// 0 every agent whose parent is not listed, is a root; a leaf's children
// are an empty list, never null, on the wire.
func TestBuildTree(t *testing.T) {
	ag := func(id, parent kin.AgentID) *kin.Agent { return &kin.Agent{ID: id, Parent: parent} }
	agents := []*kin.Agent{ag(2, 1), ag(5, 2), ag(3, 2), ag(9, 7), ag(4, 3), ag(6, 5)}
	shape := func(ns []*kin.TreeNode) string {
		var b strings.Builder
		var walk func(ns []*kin.TreeNode)
		walk = func(ns []*kin.TreeNode) {
			b.WriteString("(")
			for i, n := range ns {
				if i > 0 {
					b.WriteString(" ")
				}
				b.WriteString(n.ID.String())
				if len(n.Children) > 0 {
					walk(n.Children)
				}
			}
			b.WriteString(")")
		}
		walk(ns)
		return b.String()
	}
	if got, want := shape(BuildTree(agents, 0)), "(2(5(6) 3(4)) 9)"; got != want {
		t.Errorf("forest = %s, want %s", got, want)
	}
	if got, want := shape(BuildTree(agents[1:3], 2)), "(5 3)"; got != want {
		t.Errorf("an agent's subtree without it = %s, want %s", got, want)
	}
	sub := []*kin.Agent{ag(5, 2), ag(6, 5)}
	trees := BuildTree(sub, 5)
	if got, want := shape(trees), "(5(6))"; got != want {
		t.Errorf("subtree at 5 = %s, want %s", got, want)
	}
	data, err := json.Marshal(trees)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `"children":[]`) || strings.Contains(string(data), `"children":null`) {
		t.Errorf("a leaf's children are not an empty list: %s", data)
	}
	if got := BuildTree(nil, 0); got == nil || len(got) != 0 {
		t.Errorf("BuildTree(nil) = %#v, want an empty list", got)
	}
}
