package ctxfs_test

import (
	"go/build"
	"strings"
	"testing"
)

// TestImports keeps the package below the daemon: it may import the
// standard library, package kin and golang.org/x/sys/unix, nothing else of
// ours (never the daemon, the store or the HTTP API).
func TestImports(t *testing.T) {
	pkg, err := build.Default.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range pkg.Imports {
		first := strings.SplitN(imp, "/", 2)[0]
		if strings.Contains(first, ".") && imp != "github.com/kin-agents/kin/kin" && imp != "golang.org/x/sys/unix" {
			t.Errorf("package ctxfs imports %q; it may import only the standard library, kin and x/sys/unix", imp)
		}
	}
}
