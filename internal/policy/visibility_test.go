package policy

import (
	"strings"
	"testing"

	"github.com/kin-agents/kin/kin"
)

// Seed 003 §4: reads happen only with both sides' consent, within both
// sides' scopes.
func TestCanRead(t *testing.T) {
	nova := &kin.Visibility{ReadFrom: []string{"mano", "9"}, Scope: []string{"memory/**", "SOUL.md", "projects/**"}}
	mano := &kin.Visibility{ReadableTo: []string{"nova"}, Scope: []string{"memory/**", "SOUL.md"}}
	tests := []struct {
		name   string
		reader *kin.Visibility
		owner  *kin.Visibility
		rel    string
		want   string // "" = allowed; else a part of the reason
	}{
		{"within scope", nova, mano, "memory/2026-03-01.md", ""},
		{"within scope, a top file", nova, mano, "SOUL.md", ""},
		{"within scope, cleaned", nova, mano, "memory//notes.md", ""},
		{"out of the owner's scope", nova, mano, "projects/x.md", "outside the scope [memory/** SOUL.md] of mano (agent 2) (the owner)"},
		{"out of the reader's scope", nova, &kin.Visibility{ReadableTo: []string{"nova"}, Scope: []string{"**"}}, "USER.md", "(the reader)"},
		{"one-sided: the owner never consented", nova, &kin.Visibility{Scope: []string{"**"}}, "SOUL.md", "mano (agent 2) does not consent to be read by nova (agent 1)"},
		{"one-sided: the owner has no visibility", nova, nil, "SOUL.md", "does not consent"},
		{"one-sided: the reader never asked", &kin.Visibility{Scope: []string{"**"}}, mano, "SOUL.md", "nova (agent 1) does not ask to read from mano (agent 2)"},
		{"one-sided: the reader has no visibility", nil, mano, "SOUL.md", "does not ask"},
		{"by id", &kin.Visibility{ReadFrom: []string{"2"}, Scope: []string{"**"}}, &kin.Visibility{ReadableTo: []string{"1"}, Scope: []string{"**"}}, "SOUL.md", ""},
		{"dot-dot is refused before matching", nova, mano, "memory/../secrets", `".." component`},
		{"dot-dot at the start", nova, mano, "../mano2/SOUL.md", `".." component`},
		{"absolute", nova, mano, "/home/mano/SOUL.md", "is absolute"},
		{"empty", nova, mano, "", "empty"},
		{"the workspace itself", nova, mano, "./", "the workspace itself"},
		{"NUL", nova, mano, "SOUL.md\x00", "NUL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := CanRead("nova", 1, tt.reader, "mano", 2, tt.owner, tt.rel)
			switch {
			case tt.want == "" && !d.Allowed:
				t.Fatalf("denied: %s", d.Reason)
			case tt.want != "" && d.Allowed:
				t.Fatalf("allowed: %s", d.Reason)
			case !strings.Contains(d.Reason, tt.want):
				t.Fatalf("reason %q lacks %q", d.Reason, tt.want)
			}
		})
	}
}
