package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
)

// viewProbes are the probes TestViewGrantsWhatTheWalkGrants runs both
// ways: inside and beside the hidden home, the read-only path, the system.
func viewProbes(base, home, session, other, ro string) []string {
	return []string{
		"read:" + filepath.Join(home, "operator.token"),
		"list:" + home,
		"write:" + filepath.Join(home, "new"),
		"read:" + filepath.Join(other, "notes"),
		"write:" + filepath.Join(other, "new"),
		"write:" + filepath.Join(session, "out"),
		"read:/etc/hostname",
		"write:" + filepath.Join(base, "new-beside-home"),
		"read:" + filepath.Join(ro, "file"),
		"write:" + filepath.Join(ro, "new"),
		"read:" + filepath.Join(base, "late", "file"),
	}
}

// TestViewGrantsWhatTheWalkGrants: a shim given the daemon's ruleset
// (View, Spec.ViewFD) allows and refuses exactly what a shim walking the
// view itself does, also after entries appear, change and go on the chains
// between two spawns (the View re-reads what changed).
func TestViewGrantsWhatTheWalkGrants(t *testing.T) {
	requireLandlock(t)
	base := tempDir(t)
	// The walk runs as the shim's user (root here); the View as others:
	// open the chain to others, as a home reachable by agents is.
	openChain(t, base)
	home := filepath.Join(base, "home")
	session := filepath.Join(home, "session")
	other := filepath.Join(base, "other")
	ro := filepath.Join(base, "ro")
	for _, d := range []string{session, other, ro} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(home, "operator.token"), "secret")
	writeFile(t, filepath.Join(other, "notes"), "visible")
	writeFile(t, filepath.Join(ro, "file"), "read only")

	// The test binary is in a directory of go test's closed to others,
	// which the View leaves out for an agent's user: granted as the
	// daemon grants kin's binary.
	v := NewView([]string{home}, []string{ro, testExe(t)})
	defer v.Close()
	both := func(step string) {
		t.Helper()
		spec := allSpec(t, []string{home}, viewProbes(base, home, session, other, ro)...)
		spec.RW, spec.RO = []string{session}, []string{ro, testExe(t)}
		walked := probeResults(t, spec)

		if !v.Matches(&spec) {
			t.Fatalf("%s: the View does not match the spec it was made for", step)
		}
		fd, err := v.Ruleset(ABI(), spec.ScopeSignals, 65534, []int{65534})
		if err != nil {
			t.Fatalf("%s: Ruleset: %v", step, err)
		}
		f := os.NewFile(uintptr(fd), "view")
		defer f.Close()
		spec.ViewFD = 3
		viewed := probeResultsFiles(t, spec, []*os.File{f})
		if len(walked) != len(viewed) {
			t.Fatalf("%s: %d results walking, %d with the view", step, len(walked), len(viewed))
		}
		for i := range walked {
			if walked[i].OK != viewed[i].OK {
				t.Errorf("%s: %s %s: walking the view: allowed %v; the daemon's view: allowed %v (%s)", step,
					walked[i].Op, walked[i].Path, walked[i].OK, viewed[i].OK, viewed[i].Err)
			}
		}
		if !walked[3].OK || walked[0].OK {
			t.Fatalf("%s: the walk itself is off: %+v", step, walked)
		}
	}
	both("first")
	// An entry appears beside the home: the next spawn sees it both ways.
	if err := os.MkdirAll(filepath.Join(base, "late"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(base, "late", "file"), "late")
	both("after a new entry")
	// An entry is replaced by another of the same name, one goes.
	if err := os.RemoveAll(other); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(other, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(other, "notes"), "again")
	if err := os.RemoveAll(filepath.Join(base, "late")); err != nil {
		t.Fatal(err)
	}
	both("after a replaced and a removed entry")
}

// TestViewIsNotSharedWithADirectorysOwner: an agent owning (or in the
// group of) a directory on the chains could list it where others cannot,
// so the View does not speak for it; nor for anyone where an ACL is set.
func TestViewIsNotSharedWithADirectorysOwner(t *testing.T) {
	requireLandlock(t)
	base := tempDir(t)
	openChain(t, base)
	home := filepath.Join(base, "home")
	if err := os.MkdirAll(home, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(base, 4242, 4343); err != nil {
		t.Fatal(err)
	}
	v := NewView([]string{home}, nil)
	defer v.Close()
	for _, c := range []struct {
		uid  int
		gids []int
		ok   bool
	}{{4242, []int{1}, false}, {1, []int{4343}, false}, {1, []int{1}, true}} {
		fd, err := v.Ruleset(ABI(), false, c.uid, c.gids)
		if fd >= 0 {
			os.NewFile(uintptr(fd), "view").Close()
		}
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, ErrViewNotShared)) {
			t.Errorf("uid %d gids %v: %v; want shared: %v", c.uid, c.gids, err, c.ok)
		}
		if got := v.SharedWith(c.uid, c.gids); got != c.ok {
			t.Errorf("SharedWith(%d, %v) = %v, want %v", c.uid, c.gids, got, c.ok)
		}
	}
	if !slices.Equal(v.special, []string{home}) {
		t.Errorf("special = %v", v.special)
	}
}

// TestSpecRefusesABadViewFD: the descriptor must be a Landlock ruleset, and
// the spec must be an All view.
func TestSpecRefusesABadViewFD(t *testing.T) {
	requireLandlock(t)
	spec := allSpec(t, nil, "read:/etc/hostname")
	spec.ViewFD = 3
	f, err := os.Open("/etc/hostname")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := runShimArgsFiles(t, mustArgs(t, spec), []*os.File{f})
	oneLineFailure(t, r, ExitCannotRun, "view: descriptor 3", "not a Landlock ruleset")
	spec.All = false
	if _, err := Args(spec); err == nil {
		t.Errorf("a view_fd without all was accepted")
	}
	spec.All, spec.ViewFD = true, 2
	if _, err := Args(spec); err == nil {
		t.Errorf("view_fd 2 was accepted")
	}
}

func mustArgs(t testing.TB, spec Spec) []string {
	t.Helper()
	a, err := Args(spec)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// openChain makes the test's own directories from dir up to /tmp listable
// by others (t.TempDir makes them 0700).
func openChain(t *testing.T, dir string) {
	t.Helper()
	tmp, err := filepath.EvalSymlinks(os.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for p := dir; p != tmp && p != "/" && within(p, tmp); p = filepath.Dir(p) {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// TestViewGivesUpPastMaxEntries: chains with more entries than the View
// may hold open are left to the shims (and the View holds nothing).
func TestViewGivesUpPastMaxEntries(t *testing.T) {
	requireLandlock(t)
	defer func(n int) { maxViewEntries = n }(maxViewEntries)
	base := tempDir(t)
	openChain(t, base)
	home := filepath.Join(base, "home")
	if err := os.MkdirAll(home, 0o755); err != nil {
		t.Fatal(err)
	}
	v := NewView([]string{home}, nil)
	defer v.Close()
	if err := v.Warm(); err != nil {
		t.Fatal(err)
	}
	maxViewEntries = v.held + 10
	for i := range 20 {
		writeFile(t, filepath.Join(base, "f"+strconv.Itoa(i)), "x")
	}
	fd, err := v.Ruleset(ABI(), false, 1, []int{1})
	if fd >= 0 {
		os.NewFile(uintptr(fd), "view").Close()
	}
	if !errors.Is(err, ErrViewNotShared) || v.held != 0 || len(v.dirs) != 0 {
		t.Fatalf("past the bound: %v, %d descriptors held in %d directories", err, v.held, len(v.dirs))
	}
}
