package kin_test

import (
	"go/build"
	"strings"
	"testing"
)

// TestPackageKinImportsOnlyStdlib keeps the domain package free of
// dependencies: everything imports it, so it imports nothing of ours or of
// anyone else's.
func TestPackageKinImportsOnlyStdlib(t *testing.T) {
	pkg, err := build.Default.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range pkg.Imports {
		if strings.Contains(strings.SplitN(imp, "/", 2)[0], ".") {
			t.Errorf("package kin imports %q; it may import only the standard library", imp)
		}
	}
}
