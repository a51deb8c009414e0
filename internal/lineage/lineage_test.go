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
	if l.Chain(9) != nil || l.Parent(5) != 2 || l.Parent(8) != 0 || l.Len() != 8 {
		t.Error("Chain, Parent or Len is wrong")
	}
}
