package sandbox

import (
	"encoding/json"
	"strings"
	"testing"
)

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// FuzzArgs feeds the shim's parser arbitrary command lines: it must never
// panic, its errors are one line, and what it accepts Args reproduces.
func FuzzArgs(f *testing.F) {
	f.Add("--spec", `{"argv":["/bin/true"]}`)
	f.Add("--spec", `{"rw":["/tmp/s"],"ro":["/usr","/etc"],"restrict":true,"argv":["sh","-c","echo"]}`)
	f.Add("--spec=", `{"argv":["x"]}`)
	f.Add("--spec", `{"argv":["x"],"OpenFiles":-1}`)
	f.Add("--spec", `{"argv":["x"],"ro":["/a/../b"]}`)
	f.Fuzz(func(t *testing.T, a0, a1 string) {
		for _, args := range [][]string{{a0, a1}, {a0 + a1}, {a0}} {
			spec, err := parseArgs(args)
			if err != nil {
				msg := err.Error()
				if strings.Contains(msg, "\n") || !(strings.HasPrefix(msg, "bad spec: ") || strings.HasPrefix(msg, "bad arguments: ")) {
					t.Fatalf("parseArgs(%q): error not one line starting \"bad \": %q", args, msg)
				}
				continue
			}
			if len(spec.Argv) == 0 || spec.Argv[0] == "" {
				t.Fatalf("parseArgs(%q) accepted an empty command", args)
			}
			for _, p := range append(append([]string{}, spec.RW...), spec.RO...) {
				if checkPath(p) != nil {
					t.Fatalf("parseArgs(%q) accepted path %q", args, p)
				}
			}
			again, err := Args(spec)
			if err != nil {
				if strings.Contains(err.Error(), "more than one argument may hold") {
					continue
				}
				t.Fatalf("Args of an accepted spec %+v: %v", spec, err)
			}
			back, err := parseArgs(again)
			if err != nil {
				t.Fatalf("parseArgs(Args(%+v)): %v", spec, err)
			}
			if a, b := mustJSON(t, back), mustJSON(t, spec); a != b {
				t.Fatalf("round trip: %s != %s", a, b)
			}
		}
	})
}
