package registry

import (
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
