package template_test

import (
	"encoding/json"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/kin-agents/kin/internal/template"
	"github.com/kin-agents/kin/kin"
)

// FuzzCheckRender feeds Check, Placeholders and Render a template (as JSON,
// as it comes over the wire) and two built-in values: they must not panic,
// Render must refuse what Check refuses, and what Render returns must be
// safe to write. Its seed corpus is in testdata/fuzz/FuzzCheckRender.
func FuzzCheckRender(f *testing.F) {
	f.Add(`{"files":[{"path":"{AGENT_NAME}.md","data":"{PARENT}"}]}`, "nova", "mano")
	f.Fuzz(func(t *testing.T, wire, name, parent string) {
		var tm kin.Template
		if json.Unmarshal([]byte(wire), &tm) != nil {
			return
		}
		_, perr := template.Placeholders(tm)
		cerr := template.Check(tm)
		out, err := template.Render(tm, map[string]string{
			template.AgentName: name, template.Parent: parent, template.ParentA: parent,
			template.Responsible: "alice", template.Role: "student",
		})
		if cerr != nil && err == nil {
			t.Fatalf("Check refused (%v) what Render accepted", cerr)
		}
		if perr != nil && cerr == nil {
			t.Fatalf("Placeholders refused (%v) what Check accepted", perr)
		}
		if err != nil {
			if kin.ErrorCodeOf(err) != kin.ECodeInvalid {
				t.Fatalf("Render: %v, not an invalid-input error", err)
			}
			return
		}
		if len(out) != len(tm.Files) {
			t.Fatalf("%d files rendered from %d", len(out), len(tm.Files))
		}
		seen := map[string]bool{}
		total := 0
		for i, f := range out {
			p := f.Path
			if p == "" || p == "." || path.IsAbs(p) || path.Clean(p) != p || !filepath.IsLocal(p) ||
				strings.ContainsRune(p, 0) || !utf8.ValidString(p) {
				t.Fatalf("unsafe rendered path %q", p)
			}
			for _, c := range strings.Split(p, "/") {
				if c == ".." || c == "." || c == "" {
					t.Fatalf("rendered path %q has component %q", p, c)
				}
			}
			if strings.Count(p, "/") != strings.Count(tm.Files[i].Path, "/") {
				t.Fatalf("rendering %q into %q changed its depth", tm.Files[i].Path, p)
			}
			if _, dup := seen[p]; dup {
				t.Fatalf("rendered path %q twice", p)
			}
			if d := path.Dir(p); d != "." && !seen[d] {
				t.Fatalf("rendered %q before its directory", p)
			}
			seen[p] = f.Dir
			if f.Mode&^0o777 != 0 || len(f.Data) > template.MaxFileSize {
				t.Fatalf("rendered %s with mode %o and %d bytes", p, f.Mode, len(f.Data))
			}
			total += len(f.Data)
		}
		if total > template.MaxTotalSize {
			t.Fatalf("rendered %d bytes", total)
		}
	})
}
