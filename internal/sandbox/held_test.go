package sandbox

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Held grants: descriptors the daemon opened when it checked the policy,
// inherited by the shim as descriptors 3 and up.

// openHeld opens p as the daemon does (O_PATH, following no link) and
// describes it as descriptor fd of the shim.
func openHeld(t testing.TB, p string, fd int, rw bool) (Held, *os.File) {
	t.Helper()
	n, err := unix.Openat2(unix.AT_FDCWD, p, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC | unix.O_NOFOLLOW,
		Resolve: unix.RESOLVE_NO_SYMLINKS,
	})
	if err != nil {
		t.Fatalf("open %s: %v", p, err)
	}
	f := os.NewFile(uintptr(n), p)
	t.Cleanup(func() { f.Close() })
	var st unix.Stat_t
	if err := unix.Fstat(n, &st); err != nil {
		t.Fatal(err)
	}
	return Held{Path: p, FD: fd, RW: rw, Dev: uint64(st.Dev), Ino: st.Ino}, f
}

func runShimHeld(t testing.TB, spec Spec, files []*os.File) run {
	t.Helper()
	args, err := Args(spec)
	if err != nil {
		t.Fatalf("Args: %v", err)
	}
	return runShimArgsFiles(t, args, files)
}

func TestHeldGrantIsTheDescriptorsFolderEvenIfThePathNowNamesAnother(t *testing.T) {
	requireLandlock(t)
	t.Parallel()
	dir, hidden := tempDir(t), tempDir(t)
	granted := filepath.Join(dir, "granted")
	if err := os.Mkdir(granted, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(granted, "f"), "granted\n")
	writeFile(t, filepath.Join(hidden, "f"), "hidden\n")
	h, f := openHeld(t, granted, 3, true)
	// The swap the daemon must not follow: the checked folder moves away
	// and its path becomes a link to a folder no check approved.
	moved := filepath.Join(dir, "moved")
	if err := os.Rename(granted, moved); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(hidden, granted); err != nil {
		t.Fatal(err)
	}
	spec := baseSpec(t,
		"read:"+filepath.Join(moved, "f"), "write:"+filepath.Join(moved, "new"),
		"read:"+filepath.Join(granted, "f"), "read:"+filepath.Join(hidden, "f"), "list:"+hidden,
		"fdsof:"+moved)
	spec.Held = []Held{h}
	res := probeResultsFiles(t, spec, []*os.File{f})
	if len(res) != 6 {
		t.Fatalf("got %d results, want 6: %+v", len(res), res)
	}
	expect(t, res[0], true) // the checked folder, wherever it is now
	expect(t, res[1], true)
	for _, r := range res[2:5] {
		expect(t, r, false) // the folder the path names now
	}
	if !res[5].OK || res[5].N != 0 {
		t.Errorf("the agent inherited the held descriptor: %+v", res[5])
	}
}

func TestHeldDescriptorOfAnotherFileIsRefused(t *testing.T) {
	requireLandlock(t)
	t.Parallel()
	dir, other := tempDir(t), tempDir(t)
	marker := filepath.Join(dir, "marker")
	h, _ := openHeld(t, dir, 3, true)
	_, f := openHeld(t, other, 3, true) // what descriptor 3 really is
	spec := baseSpec(t, "write:"+marker)
	spec.Held = []Held{h}
	r := runShimHeld(t, spec, []*os.File{f})
	oneLineFailure(t, r, ExitCannotRun, "path \""+dir+"\"", "descriptor 3 is file", "that kin checked")
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("the agent ran")
	}
}

func TestHeldDescriptorThatIsALinkIsRefused(t *testing.T) {
	requireLandlock(t)
	t.Parallel()
	dir := tempDir(t)
	link := filepath.Join(dir, "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	n, err := unix.Open(link, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(n), link)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(n, &st); err != nil {
		t.Fatal(err)
	}
	spec := baseSpec(t, "list:"+dir)
	spec.Held = []Held{{Path: link, FD: 3, Dev: uint64(st.Dev), Ino: st.Ino}}
	r := runShimHeld(t, spec, []*os.File{f})
	oneLineFailure(t, r, ExitCannotRun, "path \""+link+"\"", "symbolic link")
}

func TestHeldDescriptorMissingIsRefused(t *testing.T) {
	requireLandlock(t)
	t.Parallel()
	dir := tempDir(t)
	h, _ := openHeld(t, dir, 3, false)
	spec := baseSpec(t, "list:"+dir)
	spec.Held = []Held{h}
	r := runShimHeld(t, spec, nil)
	// Descriptor 3 is the shim's own (the Go runtime's) or none: either
	// way not the checked folder.
	oneLineFailure(t, r, ExitCannotRun, "path \""+dir+"\"", "descriptor 3")
}

func TestHeldSpecIsValidated(t *testing.T) {
	ok := Held{Path: "/work", FD: 3, Dev: 1, Ino: 2}
	for _, tc := range []struct {
		name string
		edit func(*Spec)
		want string
	}{
		{"stdio descriptor", func(s *Spec) { s.Held = []Held{{Path: "/work", FD: 2}} }, "descriptor 2"},
		{"same descriptor twice", func(s *Spec) { s.Held = []Held{ok, {Path: "/other", FD: 3}} }, "distinct descriptor"},
		{"relative path", func(s *Spec) { s.Held = []Held{{Path: "work", FD: 3}} }, "not absolute"},
		{"without restrict", func(s *Spec) { s.Restrict = false; s.Held = []Held{ok} }, "without restrict"},
		{"held ro inside rw", func(s *Spec) { s.RW = []string{"/"}; s.Held = []Held{ok} }, "inside rw path"},
		{"ro inside held rw", func(s *Spec) { s.RO = []string{"/work/x"}; s.Held = []Held{{Path: "/work", FD: 3, RW: true}} }, "inside rw path"},
	} {
		spec := Spec{Restrict: true, Argv: []string{"/bin/true"}}
		tc.edit(&spec)
		_, err := Args(spec)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "bad spec:") {
			t.Errorf("%s: Args = %v, want a bad spec saying %q", tc.name, err, tc.want)
		}
	}
}

func TestOpenComponentsRefusesALink(t *testing.T) {
	dir := tempDir(t)
	link := filepath.Join(dir, "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	if _, err := openComponents(link); err != unix.ELOOP {
		t.Errorf("openComponents(link) = %v, want ELOOP", err)
	}
	if _, err := OpenNoLinks(link); err != unix.ELOOP {
		t.Errorf("OpenNoLinks(link) = %v, want ELOOP", err)
	}
	fd, err := openComponents(dir)
	if err != nil {
		t.Fatalf("openComponents(%s) = %v", dir, err)
	}
	unix.Close(fd)
}

// TestShimLeavesTheAgentOnlyStdio: a descriptor the shim was handed open
// (the supervisor starts it from its own binary's descriptor, Spec.Exe of
// the supervisor) does not reach the agent's command.
func TestShimLeavesTheAgentOnlyStdio(t *testing.T) {
	requireLandlock(t)
	t.Parallel()
	secret := filepath.Join(tempDir(t), "handed")
	writeFile(t, secret, "x")
	f, err := os.Open(secret)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	spec := baseSpec(t, "fdsof:"+secret)
	spec.RO = append(spec.RO, filepath.Dir(secret))
	args, err := Args(spec)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(testExe(t), append([]string{"shim"}, args...)...)
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	cmd.ExtraFiles = []*os.File{f} // descriptor 3, not close-on-exec
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("shim: %v", err)
	}
	var r probeResult
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("probe said %q: %v", out, err)
	}
	if !r.OK || r.N != 0 {
		t.Fatalf("the agent holds %d descriptor(s) of the file the shim was handed (%+v); want 0", r.N, r)
	}
}
