package policy

import (
	"go/build"
	"slices"
	"strings"
	"testing"
)

// TestImports keeps the package pure: the standard library (without the
// packages that reach the outside world), package kin, and the two parsers
// it was given. It can never reach into the daemon, the store or the API.
func TestImports(t *testing.T) {
	pkg, err := build.Default.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	allowed := []string{"github.com/kin-agents/kin/kin", "sigs.k8s.io/yaml", "github.com/bmatcuk/doublestar/v4"}
	forbidden := []string{"os", "os/exec", "net", "net/http", "syscall", "io/fs", "log", "log/slog", "sync", "time/tzdata"}
	for _, imp := range pkg.Imports {
		third := strings.Contains(strings.SplitN(imp, "/", 2)[0], ".")
		if third && !slices.Contains(allowed, imp) || slices.Contains(forbidden, imp) {
			t.Errorf("package policy imports %q; it may import only the standard library (no I/O), package kin, sigs.k8s.io/yaml and doublestar", imp)
		}
	}
}
