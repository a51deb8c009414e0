package jsonlist

import (
	"encoding/json"
	"slices"
	"testing"
)

// same fails unless Parse(s) answers what encoding/json does.
func same(t *testing.T, s string) {
	t.Helper()
	var want []string
	wantErr := json.Unmarshal([]byte(s), &want)
	got, err := Parse(s)
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("Parse(%q): error %v, encoding/json's %v", s, err, wantErr)
	}
	if err != nil {
		return
	}
	if !slices.Equal(got, want) || (got == nil) != (want == nil) {
		t.Fatalf("Parse(%q) = %#v, encoding/json %#v", s, got, want)
	}
}

func TestParseAsEncodingJSON(t *testing.T) {
	for _, s := range []string{
		`["sleep","3600"]`, `[]`, `null`, `[""]`, `["a",""]`, `["é","日本"]`,
		`["a\"b"]`, `["a\\"]`, `["\u003c"]`, `["tab\there"]`, "[\"raw\ttab\"]", "[\"\xff\"]",
		`[ "a" ]`, `["a", "b"]`, `["a",]`, `[,"a"]`, `["a""b"]`, `["a"`, `"a"`, ``, `[`, `]`,
		`["a",1]`, `[1]`, `{}`, `["a"]x`, `["a"] `,
	} {
		same(t, s)
	}
	// A command as kin stores it takes the fast path.
	for _, s := range []string{`["sleep","3600"]`, `[]`, `["sh","-c","echo é"]`} {
		if _, ok := plain(s); !ok {
			t.Errorf("plain(%q) is not ok", s)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{`["sleep","3600"]`, `[]`, `null`, `["a\"b"]`, "[\"\xff\"]", `["a",]`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) { same(t, s) })
}
