package cli

import (
	"runtime"
	"strings"
	"testing"

	"github.com/kin-agents/kin/internal/kintest"
)

func TestVersion(t *testing.T) {
	d := kintest.StartDaemon(t)
	for _, args := range [][]string{{"version"}, {"--version"}} {
		r := kinAt(t, d, args...)
		wantOK(t, r)
		for _, want := range []string{"kin ", "commit ", "go  ", runtime.Version(), "store ", "sqlite", "containment "} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("kin %v lacks %q:\n%s", args, want, r.stdout)
			}
		}
	}
	// No daemon: said plainly, and the rest still printed.
	r := runCLI(t, "--home", t.TempDir(), "version")
	wantOK(t, r)
	if !strings.Contains(r.stdout, "no daemon answers") || !strings.Contains(r.stdout, "kin serve") || !strings.Contains(r.stdout, runtime.Version()) {
		t.Errorf("kin version without a daemon:\n%s", r.stdout)
	}
}
