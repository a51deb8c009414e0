package ctxfs_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/kin-agents/kin/internal/ctxfs"
	"github.com/kin-agents/kin/internal/proctest"
)

// resultFixture is a child's output directory and its parent's child
// directory, for CopyResult tests.
type resultFixture struct {
	f             *ctxfs.FS
	parent, child ctxfs.Session
	out, slot     string
}

func newResultFixture(t *testing.T, o ctxfs.Options) *resultFixture {
	t.Helper()
	f := openFS(t, t.TempDir(), o)
	parent, child := twoAgents(t, f, nobody)
	return &resultFixture{
		f: f, parent: parent, child: child,
		out:  f.OutputDir(child.UID, child.Agent, child.ID),
		slot: f.ChildDir(parent.UID, parent.Agent, parent.ID, child.Agent),
	}
}

// put writes a file in the child's output as the child would (owned by it).
func (r *resultFixture) put(t *testing.T, rel, content string) {
	t.Helper()
	p := filepath.Join(r.out, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	r.chownUp(t, p)
}

// chownUp gives p and its directories up to the output dir to the child.
func (r *resultFixture) chownUp(t *testing.T, p string) {
	t.Helper()
	for ; p != r.out; p = filepath.Dir(p) {
		if err := os.Lchown(p, r.child.UID, r.child.GID); err != nil {
			t.Fatal(err)
		}
	}
}

func TestCopyResult(t *testing.T) {
	requireRoot(t)
	r := newResultFixture(t, ctxfs.Options{})
	r.put(t, "result.md", seedResult)
	r.put(t, "refs.jsonl", seedRefs)
	r.put(t, "artifact/patch.diff", seedPatch)
	r.put(t, "artifact/notes/risk.md", "risk notes\n")
	m, err := r.f.CopyResult(r.out, r.slot)
	if err != nil {
		t.Fatal(err)
	}
	want := ctxfs.Manifest{Result: true, Refs: true, Files: []ctxfs.CopiedFile{
		{Path: "artifact/notes/risk.md", Size: 11, SHA256: sha("risk notes\n")},
		{Path: "artifact/patch.diff", Size: int64(len(seedPatch)), SHA256: sha(seedPatch)},
		{Path: "refs.jsonl", Size: int64(len(seedRefs)), SHA256: sha(seedRefs)},
		{Path: "result.md", Size: int64(len(seedResult)), SHA256: sha(seedResult)},
	}}
	if !reflect.DeepEqual(m, want) {
		t.Errorf("manifest:\n got %+v\nwant %+v", m, want)
	}
	for _, c := range want.Files {
		p := filepath.Join(r.slot, c.Path)
		if b := mustRead(t, p); sha(string(b)) != c.SHA256 {
			t.Errorf("%s: content differs", c.Path)
		}
		if uid, gid, mode := statOf(t, p); uid != r.parent.UID || gid != r.parent.GID || mode != 0o600 {
			t.Errorf("%s: %d:%d %v, want the parent's, 0600", c.Path, uid, gid, mode)
		}
	}
	if uid, _, mode := statOf(t, filepath.Join(r.slot, "artifact", "notes")); uid != r.parent.UID || mode != fs.ModeDir|0o700 {
		t.Errorf("artifact/notes: uid %d %v", uid, mode)
	}

	// A second copy replaces the first: what the child no longer has goes.
	os.RemoveAll(filepath.Join(r.out, "artifact"))
	os.Remove(filepath.Join(r.out, "refs.jsonl"))
	r.put(t, "result.md", "Summary:\nsecond try\n")
	r.put(t, "artifact/v2.diff", "v2\n")
	m, err = r.f.CopyResult(r.out, r.slot)
	if err != nil {
		t.Fatal(err)
	}
	if !m.Result || m.Refs || len(m.Files) != 2 {
		t.Errorf("second manifest %+v", m)
	}
	got := listTree(t, r.slot)
	wantTree := []string{"agent", "artifact", "artifact/v2.diff", "handoff.md", "result.md", "session", "status"}
	if !reflect.DeepEqual(got, wantTree) {
		t.Errorf("child dir after the second copy: %q, want %q", got, wantTree)
	}

	// Nothing at all: an empty artifact/ and no result (the caller judges).
	os.RemoveAll(filepath.Join(r.out, "artifact"))
	os.Remove(filepath.Join(r.out, "result.md"))
	if m, err = r.f.CopyResult(r.out, r.slot); err != nil || m.Result || len(m.Files) != 0 {
		t.Errorf("empty output: %+v, %v", m, err)
	}
	if st, err := r.f.ChildStatusOf(r.parent, "rev-123"); err != nil || st != ctxfs.ChildRunning {
		t.Errorf("status = %q, %v", st, err)
	}
	assertNoTemps(t, r.f.Root)
}

// TestCopyResultRefuses: everything in the child's output that could make
// the copy reach beyond it, or beyond the limits, fails the whole copy and
// leaves the parent's directory as it was.
func TestCopyResultRefuses(t *testing.T) {
	requireRoot(t)
	for _, c := range []struct {
		name  string
		setup func(t *testing.T, r *resultFixture)
		want  error
	}{
		{"result.md is a link", func(t *testing.T, r *resultFixture) {
			os.Remove(filepath.Join(r.out, "result.md"))
			symlink(t, r, "/etc/shadow", "result.md")
		}, ctxfs.ErrSymlink},
		{"a link in artifact/", func(t *testing.T, r *resultFixture) {
			symlink(t, r, "/etc/shadow", "artifact/shadow")
		}, ctxfs.ErrSymlink},
		{"a relative link in artifact/", func(t *testing.T, r *resultFixture) {
			symlink(t, r, "../../../../../../../coder/session/default/messages.jsonl", "artifact/m")
		}, ctxfs.ErrSymlink},
		{"artifact/ is a link", func(t *testing.T, r *resultFixture) {
			os.Remove(filepath.Join(r.out, "artifact"))
			symlink(t, r, "/etc", "artifact")
		}, ctxfs.ErrSymlink},
		{"a FIFO", func(t *testing.T, r *resultFixture) {
			p := filepath.Join(r.out, "artifact", "pipe")
			if err := syscall.Mkfifo(p, 0o600); err != nil {
				t.Fatal(err)
			}
			r.chownUp(t, p)
		}, ctxfs.ErrNotRegular},
		{"a FIFO as refs.jsonl", func(t *testing.T, r *resultFixture) {
			p := filepath.Join(r.out, "refs.jsonl")
			if err := syscall.Mkfifo(p, 0o600); err != nil {
				t.Fatal(err)
			}
			r.chownUp(t, p)
		}, ctxfs.ErrNotRegular},
		{"a file of another uid", func(t *testing.T, r *resultFixture) {
			r.put(t, "artifact/x", "x")
			os.Chown(filepath.Join(r.out, "artifact", "x"), 0, 0)
		}, ctxfs.ErrForeign},
		{"a directory of another uid", func(t *testing.T, r *resultFixture) {
			r.put(t, "artifact/d/x", "x")
			os.Chown(filepath.Join(r.out, "artifact", "d"), 0, 0)
		}, ctxfs.ErrForeign},
		{"too large", func(t *testing.T, r *resultFixture) {
			r.put(t, "artifact/big", strings.Repeat("x", 2000))
		}, ctxfs.ErrTooLarge},
		{"too many files", func(t *testing.T, r *resultFixture) {
			for _, n := range []string{"a", "b", "c", "d", "e"} {
				r.put(t, "artifact/"+n, n)
			}
		}, ctxfs.ErrTooLarge},
		{"too deep", func(t *testing.T, r *resultFixture) {
			r.put(t, "artifact/"+strings.Repeat("d/", 40)+"x", "x")
		}, ctxfs.ErrTooLarge},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newResultFixture(t, ctxfs.Options{MaxResultBytes: 1000, MaxResultFiles: 4})
			r.put(t, "result.md", "Summary:\nok\n")
			before := render(t, r.slot)
			c.setup(t, r)
			_, err := r.f.CopyResult(r.out, r.slot)
			if !errors.Is(err, c.want) {
				t.Fatalf("CopyResult: %v, want %v", err, c.want)
			}
			if after := render(t, r.slot); after != before {
				t.Errorf("the child dir changed:\n%s", diff(before, after))
			}
			assertNoTemps(t, r.f.Root)
		})
	}

	r := newResultFixture(t, ctxfs.Options{})
	outside := t.TempDir()
	if _, err := r.f.CopyResult(outside, r.slot); !errors.Is(err, ctxfs.ErrOutside) {
		t.Errorf("copy from outside the root: %v", err)
	}
	if _, err := r.f.CopyResult(r.out, outside); !errors.Is(err, ctxfs.ErrOutside) {
		t.Errorf("copy to outside the root: %v", err)
	}
	if _, err := r.f.CopyResult(r.out, r.slot+"/../../child/rev-123"); !errors.Is(err, ctxfs.ErrOutside) {
		t.Errorf("copy to a path with ..: %v", err)
	}
	// The parent's slot replaced by a link (the parent owns its session).
	os.RemoveAll(r.slot)
	if err := os.Symlink(outside, r.slot); err != nil {
		t.Fatal(err)
	}
	if _, err := r.f.CopyResult(r.out, r.slot); !errors.Is(err, ctxfs.ErrSymlink) {
		t.Errorf("copy into a link: %v", err)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Errorf("files appeared outside: %v", ents)
	}
}

func symlink(t *testing.T, r *resultFixture, target, rel string) {
	t.Helper()
	p := filepath.Join(r.out, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
	r.chownUp(t, p)
}

func TestChildDir(t *testing.T) {
	f := openFS(t, t.TempDir(), ctxfs.Options{})
	parent := ctxfs.Session{Owner: owned(), Agent: "coder", ID: "default"}
	p := ctxfs.ChildParams{Parent: parent, Child: "rev-123", ChildID: 2, ChildSession: "default", Handoff: []byte(seedHandoff)}
	if err := f.CreateChildDir(p); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a child dir without the parent's session: %v", err)
	}
	if err := f.CreateSession(ctxfs.SessionParams{Session: parent, AgentID: 1, Now: t0}); err != nil {
		t.Fatal(err)
	}
	if err := f.CreateChildDir(p); err != nil {
		t.Fatal(err)
	}
	if err := f.CreateChildDir(p); !errors.Is(err, fs.ErrExist) {
		t.Errorf("a second CreateChildDir: %v, want fs.ErrExist", err)
	}
	slot := f.ChildDir(parent.UID, parent.Agent, parent.ID, "rev-123")
	for name, want := range map[string]string{"agent": "2\n", "session": "default\n", "status": "running\n", "handoff.md": seedHandoff} {
		if b := mustRead(t, filepath.Join(slot, name)); string(b) != want {
			t.Errorf("%s = %q, want %q", name, b, want)
		}
	}
	for _, st := range []ctxfs.ChildStatus{ctxfs.ChildCompleted, ctxfs.ChildContractViolated, ctxfs.ChildFailed, ctxfs.ChildCancelled} {
		if err := f.SetChildStatus(parent, "rev-123", st); err != nil {
			t.Fatal(err)
		}
		if got, err := f.ChildStatusOf(parent, "rev-123"); got != st || err != nil {
			t.Errorf("status %q, %v; want %q", got, err, st)
		}
	}
	if err := f.SetChildStatus(parent, "rev-123", "done"); err == nil {
		t.Errorf("an invalid child status was written")
	}
	for _, bad := range []ctxfs.ChildParams{
		{Parent: parent, Child: "../x", ChildID: 2, ChildSession: "default"},
		{Parent: parent, Child: "x", ChildID: 0, ChildSession: "default"},
		{Parent: parent, Child: "x", ChildID: 2, ChildSession: "a/b"},
		{Parent: parent, Child: "x", ChildID: 2, ChildSession: "s", Status: "zombie"},
	} {
		if err := f.CreateChildDir(bad); err == nil {
			t.Errorf("CreateChildDir(%+v) succeeded", bad)
		}
	}
	assertNoTemps(t, f.Root)
}

// TestCopyResultKeepsAnEmptyArtifact: a child that hands back no artifacts
// leaves its parent's empty artifact/ as it is (no directory made and
// freed: the copy of result.md is the only new inode); one the parent
// filled is still replaced by the child's empty one.
func TestCopyResultKeepsAnEmptyArtifact(t *testing.T) {
	requireRoot(t)
	r := newResultFixture(t, ctxfs.Options{})
	r.put(t, "result.md", seedResult)
	artifact := filepath.Join(r.slot, "artifact")
	before := inode(t, artifact)
	counter, cerr := proctest.CountInodes()
	if _, err := r.f.CopyResult(r.out, r.slot); err != nil {
		t.Fatal(err)
	}
	if cerr == nil {
		n, freed := counter.Read()
		counter.Close()
		if n != 1 || freed != 0 {
			t.Errorf("the copy of result.md alone allocated %d inodes and freed %d, want 1 and 0", n, freed)
		}
	} else {
		t.Logf("inodes not counted: %v", cerr)
	}
	if inode(t, artifact) != before {
		t.Error("the empty artifact/ was replaced by another empty one")
	}
	if got := listTree(t, r.slot); !reflect.DeepEqual(got, []string{"agent", "artifact", "handoff.md", "result.md", "session", "status"}) {
		t.Errorf("child dir: %q", got)
	}

	if err := os.WriteFile(filepath.Join(artifact, "planted"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := r.f.CopyResult(r.out, r.slot); err != nil {
		t.Fatal(err)
	}
	if got := listTree(t, r.slot); !reflect.DeepEqual(got, []string{"agent", "artifact", "handoff.md", "result.md", "session", "status"}) {
		t.Errorf("child dir after the second copy: %q", got)
	}
	if uid, _, mode := statOf(t, artifact); uid != r.parent.UID || mode != fs.ModeDir|0o700 {
		t.Errorf("artifact/: uid %d %v", uid, mode)
	}
	assertNoTemps(t, r.f.Root)
}
