package ctxfs_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/kin-agents/kin/internal/ctxfs"
	"github.com/kin-agents/kin/kin"
)

const nobody = 65534

// twoAgents builds seed 001's pair on f: coder (a root, uid 1000) and its
// child rev-123 (uid childUID) with their control files and sessions, and
// rev-123's directory in coder's session.
func twoAgents(t *testing.T, f *ctxfs.FS, childUID int) (parent, child ctxfs.Session) {
	t.Helper()
	parent = ctxfs.Session{Owner: ctxfs.Owner{UID: 1000, GID: 1000}, Agent: "coder", ID: ctxfs.DefaultSession}
	child = ctxfs.Session{Owner: ctxfs.Owner{UID: childUID, GID: childUID}, Agent: "rev-123", ID: ctxfs.DefaultSession}
	ref := ctxfs.ParentRef{Agent: "coder", Session: ctxfs.DefaultSession, Run: "r123"}
	for _, a := range []struct {
		s      ctxfs.Session
		id     kin.AgentID
		parent kin.AgentID
		ref    ctxfs.ParentRef
		run    string
		pid    int
	}{{parent, 1, 0, ctxfs.ParentRef{}, "r123", 4242}, {child, 2, 1, ref, "r124", 4243}} {
		v, err := ctxfs.ControlFor(agentFixture(a.id, a.s.Agent, a.parent, a.pid), runtimeFixture(a.s.Owner, a.ref, a.id))
		if err != nil {
			t.Fatal(err)
		}
		if err := f.WriteControl(a.s.Agent, v); err != nil {
			t.Fatal(err)
		}
		p := ctxfs.SessionParams{Session: a.s, AgentID: a.id, Run: a.run, Parent: a.ref, Cwd: "/work", Now: t0}
		if !a.ref.IsZero() {
			p.Handoff = []byte(seedHandoff)
		}
		if err := f.CreateSession(p); err != nil {
			t.Fatal(err)
		}
	}
	err := f.CreateChildDir(ctxfs.ChildParams{Parent: parent, Child: "rev-123", ChildID: 2, ChildSession: child.ID, Handoff: []byte(seedHandoff)})
	if err != nil {
		t.Fatal(err)
	}
	return parent, child
}

// statOf returns the owner and permission bits of path (not following a
// link).
func statOf(t *testing.T, path string) (uid, gid int, mode fs.FileMode) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return int(st.Uid), int(st.Gid), fi.Mode()
}

// TestOwnershipAndModes checks owner and mode of everything in the tree:
// the daemon's directories, control files (daemon-owned, the agent's group),
// and sessions, every entry the agent's with 0700 directories and 0600
// files, including the child's directory in the parent's session.
func TestOwnershipAndModes(t *testing.T) {
	requireRoot(t)
	f := openFS(t, t.TempDir(), ctxfs.Options{})
	parent, child := twoAgents(t, f, nobody)
	me := os.Geteuid()
	check := func(path string, uid, gid int, mode fs.FileMode) {
		t.Helper()
		gu, gg, gm := statOf(t, path)
		if gu != uid || gg != gid || gm != mode {
			t.Errorf("%s: %d:%d %v, want %d:%d %v", strings.TrimPrefix(path, f.Root), gu, gg, gm, uid, gid, mode)
		}
	}
	check(f.AgentDir(), me, 0, fs.ModeDir|0o711)
	check(filepath.Join(f.Root, "home"), me, 0, fs.ModeDir|0o711)
	check(f.AgentFile("rev-123"), me, 0, 0o644)
	check(f.ControlDir("rev-123"), me, nobody, fs.ModeDir|0o750)
	for _, n := range ctxfs.ControlFiles {
		check(f.ControlFile("rev-123", n), me, nobody, 0o640)
		check(f.ControlFile("coder", n), me, 1000, 0o640)
	}
	for _, s := range []ctxfs.Session{parent, child} {
		home := f.HomeDir(s.UID)
		check(home, s.UID, s.GID, fs.ModeDir|0o710)
		n := 0
		err := filepath.WalkDir(home, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			n++
			if rel, _ := filepath.Rel(home, p); d.IsDir() && strings.Count(rel, "/") < 2 {
				check(p, s.UID, s.GID, fs.ModeDir|0o710) // home/<uid>, agent, <name>: the group may pass
			} else if d.IsDir() {
				check(p, s.UID, s.GID, fs.ModeDir|0o700)
			} else {
				check(p, s.UID, s.GID, 0o600)
			}
			return nil
		})
		if err != nil || n < 15 {
			t.Errorf("walked %d entries under %s: %v", n, home, err)
		}
	}
	// The owner of an existing agent directory is restored by the next write.
	if err := os.Chmod(f.ControlDir("rev-123"), 0o777); err != nil {
		t.Fatal(err)
	}
	v, _ := f.ReadControl("rev-123")
	v.PID = 1
	if err := f.WriteControl("rev-123", v); err != nil {
		t.Fatal(err)
	}
	check(f.ControlDir("rev-123"), me, nobody, fs.ModeDir|0o750)
}

// helperBinary copies the test binary where uid nobody can run it (go test
// builds it in a 0700 directory).
func helperBinary(t *testing.T, dir string) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	in, err := os.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	path := filepath.Join(dir, "ctxfs.test")
	out, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// publicTempDir is a temporary directory other uids can traverse.
func publicTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ctxfs-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestOtherUIDDenied runs the test binary as uid nobody, the uid the child
// rev-123 runs as, and has it try to read and write: it reaches its own
// session, output and control files, and is refused the parent's session
// (messages.jsonl above all: seed 001), the parent's control files, its
// slot in the parent's session and the listing of kin's directories.
func TestOtherUIDDenied(t *testing.T) {
	requireRoot(t)
	dir := publicTempDir(t)
	exe := helperBinary(t, dir)
	f := openFS(t, filepath.Join(dir, "ctx"), ctxfs.Options{})
	parent, child := twoAgents(t, f, nobody)
	pdir, cdir := f.Dir(parent), f.Dir(child)
	childSlot := f.ChildDir(parent.UID, parent.Agent, parent.ID, child.Agent)
	cases := []struct {
		op, path, want string
	}{
		{"read", filepath.Join(cdir, ctxfs.FileMessages), "ok"},
		{"append", filepath.Join(cdir, ctxfs.FileMessages), "ok"},
		{"read", filepath.Join(cdir, "context", ctxfs.FileHandoff), "ok"},
		{"write", filepath.Join(f.OutputDir(child.UID, child.Agent, child.ID), ctxfs.FileResult), "ok"},
		{"read", f.ControlFile("rev-123", ctxfs.CtlParent), "ok"},
		{"read", f.AgentFile("coder"), "ok"},

		{"write", f.ControlFile("rev-123", ctxfs.CtlStatus), "EACCES"},
		{"write", filepath.Join(f.ControlDir("rev-123"), "new"), "EACCES"},
		{"read", filepath.Join(pdir, ctxfs.FileMessages), "EACCES"},
		{"append", filepath.Join(pdir, ctxfs.FileMessages), "EACCES"},
		{"list", pdir, "EACCES"},
		{"list", f.HomeDir(parent.UID), "EACCES"},
		{"read", filepath.Join(childSlot, ctxfs.FileHandoff), "EACCES"},
		{"write", filepath.Join(childSlot, ctxfs.FileResult), "EACCES"},
		{"write", filepath.Join(childSlot, "artifact", "patch.diff"), "EACCES"},
		{"read", f.ControlFile("coder", ctxfs.CtlPolicy), "EACCES"},
		{"list", f.AgentDir(), "EACCES"},
		{"list", filepath.Join(f.Root, "home"), "EACCES"},
	}
	var ops []probeOp
	for _, c := range cases {
		ops = append(ops, probeOp{c.op, c.path})
	}
	args, _ := json.Marshal(ops)
	cmd := exec.Command(exe)
	cmd.Dir = dir
	cmd.Env = []string{helperEnv + "=probe", helperArgs + "=" + string(args)}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("probe: %v: %s", err, stderr.String())
	}
	got := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(got) != len(cases) {
		t.Fatalf("probe answered %q", out)
	}
	for i, c := range cases {
		if got[i] != c.want {
			t.Errorf("as uid %d: %s %s: %s, want %s", nobody, c.op, strings.TrimPrefix(c.path, f.Root), got[i], c.want)
		}
	}
	if b := mustRead(t, filepath.Join(pdir, ctxfs.FileMessages)); len(b) != 0 {
		t.Errorf("the parent's messages.jsonl changed: %q", b)
	}
}

// TestSymlinksNeverFollowed plants links where an agent could (inside its
// own home) and checks that no write goes through them.
func TestSymlinksNeverFollowed(t *testing.T) {
	f := openFS(t, t.TempDir(), ctxfs.Options{})
	outside := t.TempDir()
	target := filepath.Join(outside, "target")
	if err := os.WriteFile(target, []byte("precious\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o := owned()
	s := ctxfs.Session{Owner: o, Agent: "coder", ID: "default"}
	if err := f.CreateSession(ctxfs.SessionParams{Session: s, AgentID: 1, Now: t0}); err != nil {
		t.Fatal(err)
	}
	sdir := f.Dir(s)
	mustLink := func(target, link string) {
		t.Helper()
		os.RemoveAll(link)
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
	}

	// A link standing for an agent's home directory.
	mustLink(outside, f.AgentHome(o.UID, "evil"))
	err := f.CreateSession(ctxfs.SessionParams{Session: ctxfs.Session{Owner: o, Agent: "evil", ID: "default"}, AgentID: 2, Now: t0})
	if !errors.Is(err, ctxfs.ErrSymlink) {
		t.Errorf("CreateSession through a link: %v", err)
	}
	// A link standing for events.jsonl.
	events := filepath.Join(sdir, ctxfs.FileEvents)
	mustLink(target, events)
	if err := f.AppendEvent(s, []byte(`{"type":"x"}`)); !errors.Is(err, ctxfs.ErrSymlink) {
		t.Errorf("AppendEvent through a link: %v", err)
	}
	// A hard link to someone else's file (as root here, a file of another
	// uid; unprivileged, a second link is refused all the same).
	os.Remove(events)
	if err := os.Link(target, events); err != nil {
		t.Fatal(err)
	}
	if err := f.AppendEvent(s, []byte(`{"type":"x"}`)); !errors.Is(err, ctxfs.ErrForeign) {
		t.Errorf("AppendEvent to a hard link: %v", err)
	}
	// A link standing for state is replaced, not written through.
	mustLink(target, filepath.Join(sdir, ctxfs.FileState))
	if err := f.SetSessionState(s, "active", t0); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(filepath.Join(sdir, ctxfs.FileState)); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("state is not a regular file now: %v %v", fi, err)
	}
	// A link standing for context/ or context/child/.
	os.Remove(filepath.Join(sdir, "context"))
	mustLink(outside, filepath.Join(sdir, "context"))
	err = f.CreateChildDir(ctxfs.ChildParams{Parent: s, Child: "rev-123", ChildID: 2, ChildSession: "default"})
	if !errors.Is(err, ctxfs.ErrSymlink) {
		t.Errorf("CreateChildDir through a link: %v", err)
	}
	if err := f.SetChildStatus(s, "rev-123", ctxfs.ChildCompleted); !errors.Is(err, ctxfs.ErrSymlink) {
		t.Errorf("SetChildStatus through a link: %v", err)
	}
	// Paths outside the root, or with .. in them.
	for _, p := range []string{target, f.Root + "/../x", filepath.Join(f.Root, "agent") + "/../agent/x", "agent/./x"} {
		if err := f.WriteFile(p, []byte("x"), o, 0o600); !errors.Is(err, ctxfs.ErrOutside) {
			t.Errorf("WriteFile(%s): %v", p, err)
		}
	}
	if _, err := f.ReadFile(events, 0); err != nil { // the hard link: reading is harmless
		t.Errorf("ReadFile: %v", err)
	}
	mustLink(target, events)
	if _, err := f.ReadFile(events, 0); !errors.Is(err, ctxfs.ErrSymlink) {
		t.Errorf("ReadFile through a link: %v", err)
	}

	if b := mustRead(t, target); string(b) != "precious\n" {
		t.Errorf("the target outside was written: %q", b)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 1 {
		t.Errorf("files appeared outside: %v", ents)
	}
}
