package treetext

import (
	"strings"
	"testing"
)

func TestWalk(t *testing.T) {
	kids := map[string][]string{"a": {"b", "e"}, "b": {"c", "d"}, "e": {"f"}}
	var b strings.Builder
	Walk([]string{"a", "g"}, func(n, prefix string) []string {
		b.WriteString(prefix + n + "\n")
		return kids[n]
	})
	want := "a\n├── b\n│   ├── c\n│   └── d\n└── e\n    └── f\ng\n"
	if b.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", b.String(), want)
	}
}
