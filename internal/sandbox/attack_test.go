package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestAttackViewPinsMountPoints: the View keeps every entry of the chain
// directories open between spawns. Where such an entry is a mount point
// (/boot, /proc, /run beside /home; a FUSE or tmpfs mount at /tmp/x when
// kin's home is in /tmp; /home/bob beside /home/ann/.kin), that descriptor
// kept the mount busy for as long as the daemon ran: `umount` failed with
// EBUSY, which the shim's own walk (descriptors open for a few
// milliseconds) never did. The View must not hold mount roots; it opens
// them afresh for each ruleset, and still grants what is under them.
func TestAttackViewPinsMountPoints(t *testing.T) {
	requireLandlock(t)
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	base := tempDir(t)
	openChain(t, base)
	home := filepath.Join(base, "home")
	mnt := filepath.Join(base, "mnt")
	for _, d := range []string{home, mnt} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mount("kin-attack", mnt, "tmpfs", 0, "mode=0777"); err != nil {
		t.Skipf("mount tmpfs: %v", err)
	}
	mounted := true
	defer func() {
		if mounted {
			unix.Unmount(mnt, unix.MNT_DETACH)
		}
	}()
	writeFile(t, filepath.Join(mnt, "file"), "on the mount")

	v := NewView([]string{home}, nil)
	defer v.Close()
	if err := v.Warm(); err != nil {
		t.Fatal(err)
	}
	// What is under the mount is granted through the View.
	probe := func(step string, want bool) {
		t.Helper()
		spec := allSpec(t, []string{home}, "read:"+filepath.Join(mnt, "file"))
		fd, err := v.Ruleset(ABI(), spec.ScopeSignals, 65534, []int{65534})
		if err != nil {
			t.Fatalf("%s: Ruleset: %v", step, err)
		}
		f := os.NewFile(uintptr(fd), "view")
		defer f.Close()
		spec.ViewFD = 3
		res := probeResultsFiles(t, spec, []*os.File{f})
		if len(res) != 1 || res[0].OK != want {
			t.Fatalf("%s: reading %s under the mount through the View: %+v; want allowed %v", step, filepath.Join(mnt, "file"), res, want)
		}
	}
	probe("mounted", true)

	// The operator unmounts it while the daemon idles: it must not be busy.
	if err := unix.Unmount(mnt, 0); err != nil {
		if errors.Is(err, unix.EBUSY) {
			t.Fatalf("umount %s: %v: the View's descriptors keep a mount point busy", mnt, err)
		}
		t.Fatalf("umount %s: %v", mnt, err)
	}
	mounted = false
	// And the next ruleset no longer grants the gone mount's contents
	// (the directory under it is empty).
	probe("unmounted", false)
}
