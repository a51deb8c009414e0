package sqlstore

import (
	"slices"
	"testing"

	"github.com/kin-agents/kin/internal/jsonlist"
)

// TestJSONListKeepsShellCharacters: a stored command keeps '<', '>' and
// '&' as they are (json.Marshal's \u003c made every command with a redirect
// or an && one that jsonlist.Parse handed to encoding/json), and reads back
// as it was, as do the other characters JSON must escape.
func TestJSONListKeepsShellCharacters(t *testing.T) {
	for _, l := range [][]string{
		{"sh", "-c", "make && ./run <in >out 2>&1"},
		{"a\"b", `c\d`, "tab\there", "nl\n", "\u2028", "é"},
	} {
		s := jsonList(l)
		got, err := jsonlist.Parse(s)
		if err != nil || !slices.Equal(got, l) {
			t.Fatalf("jsonList(%q) = %s, read back as %q, %v", l, s, got, err)
		}
	}
	if s, want := jsonList([]string{"a && b <c>"}), `["a && b <c>"]`; s != want {
		t.Fatalf("jsonList = %s, want %s", s, want)
	}
	if s := jsonList(nil); s != "" {
		t.Fatalf("jsonList(nil) = %q, want \"\"", s)
	}
}
