package policy

import (
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzParse: no input panics, and what Parse accepts survives a JSON round
// trip unchanged (the daemon stores policies as JSON, so an empty list must
// not come back as an absent one).
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{}`,
		`{"tools": {"allow": [], "deny": ["exec"]}, "mounts": {}, "groups": []}`,
		`{"mounts": {"/": "hidden", "/work": "rw"}, "budget": {"deadline": "1h", "max_cost": 0.5}}`,
		"tools:\n  allow: [read, \"web_*\"]\nenv: [HOME]\nspawn: {allow: true, roles: [coder]}\n",
		"visibility:\n  read_from: [mano]\n  scope: [\"memory/**\"]\nuid: 1000\ndetach: false\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse(data)
		if err != nil {
			return
		}
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatalf("Marshal(%+v): %v", p, err)
		}
		q, err := Parse(b)
		if err != nil {
			t.Fatalf("Parse(%s) after a round trip: %v", b, err)
		}
		if !reflect.DeepEqual(p, q) {
			t.Fatalf("round trip changed the policy:\n%+v\n%s\n%+v", p, b, q)
		}
	})
}
