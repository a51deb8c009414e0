package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

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

	v := NewView([]string{home}, []string{testExe(t)})
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

// viewProbe runs ops in a shim restricted with v's ruleset (as an agent of
// uid 65534), and returns whether each was allowed. The probe itself runs
// as root: only Landlock refuses.
func viewProbe(t *testing.T, v *View, home string, ops ...string) []probeResult {
	t.Helper()
	spec := allSpec(t, []string{home}, ops...)
	fd, err := v.Ruleset(ABI(), spec.ScopeSignals, 65534, []int{65534})
	if err != nil {
		t.Fatalf("Ruleset: %v", err)
	}
	f := os.NewFile(uintptr(fd), "view")
	defer f.Close()
	spec.ViewFD = 3
	return probeResultsFiles(t, spec, []*os.File{f})
}

// TestAttackViewChmodChainDir: a chain directory others may no longer
// list (chmod 0700 by its owner) hides its entries from agents, as the
// shim's own walk as the agent's user would: the View, which walks as
// root, must drop what it granted there, and grant it again once the
// directory is open again.
func TestAttackViewChmodChainDir(t *testing.T) {
	requireLandlock(t)
	base := tempDir(t)
	openChain(t, base)
	home := filepath.Join(base, "home")
	other := filepath.Join(base, "other")
	for _, d := range []string{home, other} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(other, "notes"), "visible")
	v := NewView([]string{home}, []string{testExe(t)})
	defer v.Close()
	read := "read:" + filepath.Join(other, "notes")
	for _, step := range []struct {
		mode os.FileMode
		want bool
	}{{0o755, true}, {0o700, false}, {0o711, false}, {0o755, true}} {
		if err := os.Chmod(base, step.mode); err != nil {
			t.Fatal(err)
		}
		if r := viewProbe(t, v, home, read); r[0].OK != step.want {
			t.Errorf("chain directory %04o: %s allowed %v; want %v", step.mode, read, r[0].OK, step.want)
		}
	}
}

// TestAttackViewRaceEntriesSwappedForLinksToHome: while the View reads a
// chain directory, its entries are swapped (renameat2 RENAME_EXCHANGE)
// between a directory, a file and a link to kin's home, as fast as a
// local user can. No ruleset the View makes meanwhile may open kin's home
// to an agent, through the link or otherwise.
func TestAttackViewRaceEntriesSwappedForLinksToHome(t *testing.T) {
	requireLandlock(t)
	base := tempDir(t)
	openChain(t, base)
	home := filepath.Join(base, "home")
	if err := os.MkdirAll(home, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(home, "operator.token"), "secret")
	churn := filepath.Join(base, "churn")
	if err := os.MkdirAll(churn, 0o755); err != nil {
		t.Fatal(err)
	}
	const n = 8
	for i := range n {
		name := filepath.Join(base, "e"+string(rune('a'+i)))
		if err := os.Mkdir(name, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(home, filepath.Join(churn, "l"+string(rune('a'+i)))); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(churn, "f"+string(rune('a'+i))), "file")
	}
	v := NewView([]string{home}, []string{testExe(t)})
	defer v.Close()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for k := 0; ; k++ {
			select {
			case <-stop:
				return
			default:
			}
			i := k % n
			e := filepath.Join(base, "e"+string(rune('a'+i)))
			other := filepath.Join(churn, []string{"l", "f"}[k/n%2]+string(rune('a'+i)))
			unix.Renameat2(unix.AT_FDCWD, e, unix.AT_FDCWD, other, unix.RENAME_EXCHANGE)
		}
	}()
	defer func() { close(stop); <-done }()
	var ops []string
	for i := range n {
		e := filepath.Join(base, "e"+string(rune('a'+i)))
		ops = append(ops, "read:"+filepath.Join(e, "operator.token"))
	}
	ops = append(ops, "read:"+filepath.Join(home, "operator.token"), "list:"+home)
	deadline := time.Now().Add(3 * time.Second)
	rounds := 0
	for ; time.Now().Before(deadline) || rounds < 20; rounds++ {
		for _, r := range viewProbe(t, v, home, ops...) {
			// Only kin's home holds operator.token: reading it through
			// an entry is reading it through a link to the home.
			if r.OK && (r.Op == "read" && filepath.Base(r.Path) == "operator.token" || r.Op == "list" && r.Path == home) {
				t.Fatalf("round %d: %s %s allowed: kin's home reached through the View", rounds, r.Op, r.Path)
			}
		}
	}
	t.Logf("%d rounds", rounds)
}
