package leanshim_test

import (
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"

	"github.com/kin-agents/kin/internal/leanshim"
)

// TestAttackInstallKeepsAShimAnotherUserOwns: every agent starts through
// the installed shim before it is sandboxed. A shim file that holds the
// right bytes but belongs to another user (a home first served by that
// user's own daemon, then by root's), or that is a hard link to a file
// elsewhere, may be rewritten in place by that user after Install checked
// it. Install must replace it with a file of the daemon's own, not keep it.
func TestAttackInstallKeepsAShimAnotherUserOwns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("giving a file to another user needs root")
	}
	bin, ok := leanshim.Binary(runtime.GOARCH)
	if !ok {
		t.Skipf("no shim embedded for %s", runtime.GOARCH)
	}
	for _, c := range []string{"owned by another user", "a hard link"} {
		t.Run(c, func(t *testing.T) {
			dir := t.TempDir()
			dst := filepath.Join(dir, leanshim.Name)
			if err := os.WriteFile(dst, bin, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(dst, 0o755); err != nil {
				t.Fatal(err)
			}
			switch c {
			case "owned by another user":
				if err := os.Chown(dst, 4242, 4242); err != nil {
					t.Fatal(err)
				}
			case "a hard link":
				if err := os.Link(dst, filepath.Join(dir, "elsewhere")); err != nil {
					t.Fatal(err)
				}
			}
			got, err := leanshim.Install(dir)
			if err != nil {
				t.Fatal(err)
			}
			st, err := os.Lstat(got)
			if err != nil {
				t.Fatal(err)
			}
			sys := st.Sys().(*syscall.Stat_t)
			if int(sys.Uid) != os.Geteuid() || sys.Nlink != 1 {
				t.Errorf("%s: installed shim is owned by uid %d with %d links; want the daemon's (uid %d), one link", c, sys.Uid, sys.Nlink, os.Geteuid())
			}
		})
	}
}
