package sqlstore

import (
	"testing"

	"github.com/kin-agents/kin/internal/store"
)

// TestChainInOrder: a permission chain read without ORDER BY is put in
// the order of its rows' depths, texts with their rows; depths that are
// not each of 0..n-1 once are an error, never a chain.
func TestChainInOrder(t *testing.T) {
	rows := []store.PermRow{{ID: 3}, {ID: 1}, {ID: 2}}
	got, texts, err := chainInOrder(rows, []string{"c", "a", "b"}, []int64{2, 0, 1})
	if err != nil {
		t.Fatal(err)
	}
	if got[0].ID != 1 || got[1].ID != 2 || got[2].ID != 3 || texts[0] != "a" || texts[1] != "b" || texts[2] != "c" {
		t.Fatalf("in order: %+v %q; want ids 1, 2, 3 with a, b, c", got, texts)
	}
	if got, texts, err := chainInOrder(rows[:2], nil, []int64{1, 0}); err != nil || got[0].ID != 1 || texts != nil {
		t.Fatalf("without texts: %+v %q %v", got, texts, err)
	}
	for _, depths := range [][]int64{{0, 0, 1}, {0, 1, 3}, {-1, 0, 1}} {
		if _, _, err := chainInOrder(rows, nil, depths); err == nil {
			t.Errorf("depths %v: no error", depths)
		}
	}
}
