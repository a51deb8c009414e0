package daemon

import (
	"fmt"
	"testing"

	"github.com/kin-agents/kin/kin"
)

func TestLineageSubtreeAndDescendants(t *testing.T) {
	var l lineage
	// seed 000: 1 -> 2,3,4; 2 -> 5,6; 3 -> 7; 8 is another root
	for _, link := range [][2]kin.AgentID{{1, 0}, {2, 1}, {3, 1}, {4, 1}, {5, 2}, {6, 2}, {7, 3}, {8, 0}} {
		l.add(link[0], link[1])
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
		if got := fmt.Sprint(l.subtree(tt.id)); got != tt.want {
			t.Errorf("subtree(%d) = %s, want %s", tt.id, got, tt.want)
		}
	}
	if !l.isDescendant(7, 1) || !l.isDescendant(5, 2) || l.isDescendant(5, 3) || l.isDescendant(1, 1) || l.isDescendant(8, 1) || l.isDescendant(99, 1) {
		t.Error("isDescendant is wrong")
	}
	if !l.has(8) || l.has(9) || l.has(0) {
		t.Error("has is wrong")
	}
}
