package sandbox

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// eioRoot is a FUSE file system whose every lookup fails with EIO: a
// server that cannot answer (kin's served agent/ cut off from its store
// answers so after its timeout).
type eioRoot struct{ fs.Inode }

func (r *eioRoot) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EIO
}

// mountEIO mounts an eioRoot on a fresh directory (root and /dev/fuse
// needed: it mounts with mount(2), as kin does) and unmounts it at the
// test's end.
func mountEIO(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting FUSE needs root here (no fusermount)")
	}
	if f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0); err != nil {
		t.Skipf("FUSE: %v", err)
	} else {
		f.Close()
	}
	dir := filepath.Join(tempDir(t), "mnt")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	srv, err := fs.Mount(dir, &eioRoot{}, &fs.Options{
		MountOptions: fuse.MountOptions{DirectMountStrict: true, AllowOther: true, FsName: "kin-eio-test", Name: "kin-eio-test"},
	})
	if err != nil {
		t.Fatalf("mount: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
		srv.Wait()
	})
	if _, err := os.Stat(filepath.Join(dir, "home")); !errors.Is(err, syscall.EIO) {
		t.Fatalf("the test mount answers %v, want EIO", err)
	}
	return dir
}

// TestUnansweredGrantFailsTheStartUnlessOptional: a granted path whose
// file system answers EIO (an agent's home or a policy mount on a failing
// disk or a dead network file system) fails the start, loudly; it is not
// taken for a missing path and silently left out. Only the paths kin marks
// Optional (its served agent/ files) are left out on such an error.
func TestUnansweredGrantFailsTheStartUnlessOptional(t *testing.T) {
	requireLandlock(t)
	mnt := mountEIO(t)
	bad := filepath.Join(mnt, "home")
	for _, rw := range []bool{true, false} {
		spec := baseSpec(t, "read:"+testExe(t))
		if rw {
			spec.RW = append(spec.RW, bad)
		} else {
			spec.RO = append(spec.RO, bad)
		}
		r := runShim(t, spec)
		oneLineFailure(t, r, ExitCannotRun, "path "+quote(bad), "cannot open", "input/output error")

		spec.Optional = []string{bad}
		res := probeResults(t, spec)
		expect(t, res[0], true)
	}
}

// TestOptionalMustBeAGrant: Optional names paths of RW or RO only.
func TestOptionalMustBeAGrant(t *testing.T) {
	spec := baseSpec(t)
	spec.Optional = []string{"/nowhere/granted"}
	_, err := Args(spec)
	if err == nil || !strings.Contains(err.Error(), `bad spec: optional path "/nowhere/granted" is not an rw or ro path`) {
		t.Errorf("Args with an optional path not granted: %v", err)
	}
}
