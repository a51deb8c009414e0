package handoff_test

import (
	"go/build"
	"strings"
	"testing"
)

// TestImports keeps the package pure: the standard library and package kin
// only, so it can never reach into the daemon, the store or the API.
func TestImports(t *testing.T) {
	pkg, err := build.Default.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range pkg.Imports {
		if imp == "github.com/kin-agents/kin/kin" {
			continue
		}
		if strings.Contains(strings.SplitN(imp, "/", 2)[0], ".") {
			t.Errorf("package handoff imports %q; it may import only the standard library and package kin", imp)
		}
	}
}
