package ctxfs_test

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/kin-agents/kin/internal/ctxfs"
	"github.com/kin-agents/kin/kin"
)

func TestLayoutPaths(t *testing.T) {
	l := ctxfs.NewLayout("/ctx/")
	for _, c := range []struct{ got, want string }{
		{l.AgentDir(), "/ctx/agent"},
		{l.AgentFile("rev-123"), "/ctx/agent/rev-123"},
		{l.SocketPath("rev-123"), "/ctx/agent/rev-123.sock"},
		{l.ControlDir("rev-123"), "/ctx/agent/rev-123.d"},
		{l.ControlFile("rev-123", ctxfs.CtlParent), "/ctx/agent/rev-123.d/parent"},
		{l.HomeDir(1000), "/ctx/home/1000"},
		{l.AgentHome(1000, "coder"), "/ctx/home/1000/agent/coder"},
		{l.SessionDir(1000, "rev-123", "default"), "/ctx/home/1000/agent/rev-123/session/default"},
		{l.ContextDir(1000, "coder", "default"), "/ctx/home/1000/agent/coder/session/default/context"},
		{l.OutputDir(1001, "rev-123", "default"), "/ctx/home/1001/agent/rev-123/session/default/output"},
		{l.ChildDir(1000, "coder", "default", "rev-123"), "/ctx/home/1000/agent/coder/session/default/context/child/rev-123"},
	} {
		if c.got != c.want {
			t.Errorf("got %s, want %s", c.got, c.want)
		}
	}
	s := ctxfs.Session{Owner: ctxfs.Owner{UID: 1001, GID: 1001}, Agent: "rev-123", ID: "default"}
	want := []string{
		"KIN_CTX=/ctx",
		"KIN_SESSION=/ctx/home/1001/agent/rev-123/session/default",
		"KIN_HANDOFF=/ctx/home/1001/agent/rev-123/session/default/context/handoff.md",
		"KIN_OUTPUT=/ctx/home/1001/agent/rev-123/session/default/output",
	}
	if got := l.Env(s, true); !reflect.DeepEqual(got, want) {
		t.Errorf("Env = %q, want %q", got, want)
	}
	if got := l.Env(s, false); !reflect.DeepEqual(got, want[:2]) {
		t.Errorf("Env of a root = %q", got)
	}
}

func TestParentRef(t *testing.T) {
	for _, c := range []struct {
		ref  ctxfs.ParentRef
		line string
	}{
		{ctxfs.ParentRef{}, ""},
		{ctxfs.ParentRef{Agent: "coder", Session: "default", Run: "r123"}, "agent:coder session:default run:r123"}, // seed 001
		{ctxfs.ParentRef{Agent: "coder"}, "agent:coder"},
		{ctxfs.ParentRef{Agent: "HO@Server1", Run: "r1"}, "agent:HO@Server1 run:r1"},
	} {
		if got := c.ref.String(); got != c.line {
			t.Errorf("%+v.String() = %q, want %q", c.ref, got, c.line)
		}
		back, err := ctxfs.ParseParentRef(c.line)
		if err != nil || back != c.ref {
			t.Errorf("ParseParentRef(%q) = %+v, %v", c.line, back, err)
		}
	}
	for _, bad := range []string{"coder", "agent:", "session:default", "agent:a agent:b", "agent:a x:y", "agent:../x", "agent:a run:r/1"} {
		if _, err := ctxfs.ParseParentRef(bad); err == nil {
			t.Errorf("ParseParentRef(%q) succeeded", bad)
		}
	}
}

func TestControlFor(t *testing.T) {
	a := agentFixture(2, "rev-123", 1, 4243)
	parent := ctxfs.ParentRef{Agent: "coder", Session: "default", Run: "r123"}
	v, err := ctxfs.ControlFor(a, runtimeFixture(ctxfs.Owner{UID: 1001, GID: 1001}, parent, 2))
	if err != nil {
		t.Fatal(err)
	}
	if v.Life != kin.LifeOwned || v.Owner != "shai@example.com" || v.Label != "rev" || v.Status != kin.StatusActive ||
		v.PID != 4243 || v.Root != "/" || v.Parent != parent || v.Meta.ID != 2 {
		t.Errorf("derived %+v", v)
	}
	if want := []string{"HOME", "KIN_CTX", "KIN_SESSION", "PATH"}; !reflect.DeepEqual(v.Env, want) {
		t.Errorf("env = %q, want the names %q", v.Env, want)
	}
	if string(v.Policy) != `{"fs":{"/work/docs":"ro"}}` {
		t.Errorf("policy not compacted: %s", v.Policy)
	}
	a.EndedAt = t0 // ended: no pid
	if v, _ := ctxfs.ControlFor(a, ctxfs.Runtime{UID: 1, GID: 1}); v.PID != 0 {
		t.Errorf("an ended agent has pid %d", v.PID)
	}

	// Files and ParseControl are inverses.
	files, err := v.Files()
	if err != nil {
		t.Fatal(err)
	}
	m := map[string][]byte{}
	for i, f := range files {
		if f.Name != ctxfs.ControlFiles[i] {
			t.Errorf("file %d is %s, want %s", i, f.Name, ctxfs.ControlFiles[i])
		}
		if len(f.Data) > 0 && (f.Data[len(f.Data)-1] != '\n' || strings.Contains(f.Name, "json") && strings.Count(string(f.Data), "\n") != 1) {
			t.Errorf("%s = %q: not newline-terminated lines", f.Name, f.Data)
		}
		m[f.Name] = f.Data
	}
	back, err := ctxfs.ParseControl(m)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, v) {
		t.Errorf("round trip:\n got %+v\nwant %+v", back, v)
	}

	leaky := v
	leaky.Env = []string{"TOKEN=secret"}
	if _, err := leaky.Files(); err == nil {
		t.Errorf("an environment value was rendered into env")
	}

	for name, mutate := range map[string]func(*ctxfs.Runtime){
		"newline in cwd":    func(r *ctxfs.Runtime) { r.Cwd = "/work\n/etc" },
		"newline in mount":  func(r *ctxfs.Runtime) { r.Mount = []string{"/a rw\n/b rw"} },
		"empty path item":   func(r *ctxfs.Runtime) { r.Path = []string{""} },
		"bad policy":        func(r *ctxfs.Runtime) { r.Policy = json.RawMessage(`{`) },
		"negative uid":      func(r *ctxfs.Runtime) { r.UID = -1 },
		"bad parent":        func(r *ctxfs.Runtime) { r.Parent = ctxfs.ParentRef{Agent: "a b"} },
		"run without agent": func(r *ctxfs.Runtime) { r.Parent = ctxfs.ParentRef{Run: "r1"} },
		"invalid utf-8":     func(r *ctxfs.Runtime) { r.Model = "\xff" },
	} {
		rt := runtimeFixture(ctxfs.Owner{UID: 1, GID: 1}, ctxfs.ParentRef{}, 1)
		mutate(&rt)
		if _, err := ctxfs.ControlFor(agentFixture(1, "coder", 0, 1), rt); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// inode returns the inode number of path, to tell a rewrite from a skip.
func inode(t *testing.T, path string) uint64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

func TestWriteControl(t *testing.T) {
	f := openFS(t, t.TempDir(), ctxfs.Options{})
	a := agentFixture(1, "coder", 0, 4242)
	v, err := ctxfs.ControlFor(a, runtimeFixture(owned(), ctxfs.ParentRef{}, 1))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.WriteControl("coder", v); err != nil {
		t.Fatal(err)
	}
	got, err := f.ReadControl("coder")
	if err != nil || !reflect.DeepEqual(got, v) {
		t.Fatalf("ReadControl = %+v, %v", got, err)
	}
	if b := mustRead(t, f.AgentFile("coder")); string(b) != "1\n" {
		t.Errorf("agent/coder = %q, want the id", b)
	}
	if b := mustRead(t, f.ControlFile("coder", ctxfs.CtlPID)); string(b) != "4242\n" {
		t.Errorf("pid = %q", b)
	}

	// An update rewrites only what changed.
	before := map[string]uint64{}
	for _, n := range ctxfs.ControlFiles {
		before[n] = inode(t, f.ControlFile("coder", n))
	}
	a.Status = kin.StatusSuspended
	v, _ = ctxfs.ControlFor(a, runtimeFixture(owned(), ctxfs.ParentRef{}, 1))
	if err := f.WriteControl("coder", v); err != nil {
		t.Fatal(err)
	}
	for _, n := range ctxfs.ControlFiles {
		changed := inode(t, f.ControlFile("coder", n)) != before[n]
		if want := n == ctxfs.CtlStatus || n == ctxfs.CtlMeta; changed != want {
			t.Errorf("%s rewritten: %v, want %v", n, changed, want)
		}
	}
	if b := mustRead(t, f.ControlFile("coder", ctxfs.CtlStatus)); string(b) != "suspended\n" {
		t.Errorf("status = %q", b)
	}

	// A later agent of the same name takes the files over.
	b := agentFixture(9, "coder", 0, 0)
	v, _ = ctxfs.ControlFor(b, runtimeFixture(owned(), ctxfs.ParentRef{Agent: "boss"}, 9))
	if err := f.WriteControl("coder", v); err != nil {
		t.Fatal(err)
	}
	if got, err := f.ReadControl("coder"); err != nil || got.Meta.ID != 9 || got.PID != 0 || got.Parent.Agent != "boss" {
		t.Errorf("after reuse: %+v, %v", got, err)
	}
	if b := mustRead(t, f.AgentFile("coder")); string(b) != "9\n" {
		t.Errorf("agent/coder = %q after reuse", b)
	}

	if err := f.WriteControl("other", v); err == nil {
		t.Errorf("the values of coder were written as other")
	}
	for _, bad := range []string{"", "..", "a/b", "/abs", ".hidden", "x\n"} {
		if err := f.WriteControl(bad, v); err == nil {
			t.Errorf("WriteControl(%q) succeeded", bad)
		}
	}

	// RemoveControl removes the control files, never a session.
	s := ctxfs.Session{Owner: owned(), Agent: "coder", ID: "default"}
	if err := f.CreateSession(ctxfs.SessionParams{Session: s, AgentID: 9, Now: t0}); err != nil {
		t.Fatal(err)
	}
	if err := f.RemoveControl("coder"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{f.AgentFile("coder"), f.ControlDir("coder")} {
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s still there: %v", p, err)
		}
	}
	if _, err := os.Stat(filepath.Join(f.Dir(s), ctxfs.FileMessages)); err != nil {
		t.Errorf("the session went with the control files: %v", err)
	}
	if err := f.RemoveControl("coder"); err != nil {
		t.Errorf("a second RemoveControl: %v", err)
	}
	assertNoTemps(t, f.Root)
}

func TestSession(t *testing.T) {
	f := openFS(t, t.TempDir(), ctxfs.Options{})
	s := ctxfs.Session{Owner: owned(), Agent: "rev-123", ID: "default"}
	p := ctxfs.SessionParams{
		Session: s, AgentID: 2, Run: "r124", Cwd: "/work",
		Parent:  ctxfs.ParentRef{Agent: "coder", Session: "default", Run: "r123"},
		Handoff: []byte("Task: review\n"),
		Context: []ctxfs.File{{Name: "refs.jsonl", Data: []byte("{}\n")}},
		Now:     t0,
	}
	if err := f.CreateSession(p); err != nil {
		t.Fatal(err)
	}
	if err := f.CreateSession(p); !errors.Is(err, fs.ErrExist) {
		t.Errorf("a second CreateSession: %v, want fs.ErrExist", err)
	}
	dir := f.Dir(s)
	for _, name := range []string{"messages.jsonl", "events.jsonl", "latest.md", "state", "cwd", "created_at",
		"updated_at", "meta.json", "context/handoff.md", "context/refs.jsonl", "output/artifact"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Error(err)
		}
	}
	var meta ctxfs.SessionMeta
	if err := json.Unmarshal(mustRead(t, filepath.Join(dir, "meta.json")), &meta); err != nil {
		t.Fatal(err)
	}
	if meta.Parent != "agent:coder session:default run:r123" || meta.AgentID != 2 || meta.Run != "r124" || !meta.CreatedAt.Equal(t0) {
		t.Errorf("meta.json: %+v", meta)
	}
	if st, err := f.SessionState(s); err != nil || st != kin.StateRegistered {
		t.Errorf("state = %q, %v", st, err)
	}
	if err := f.SetSessionState(s, kin.StateCancelled, t0.Add(90e9)); err != nil {
		t.Fatal(err)
	}
	if st, _ := f.SessionState(s); st != kin.StateCancelled {
		t.Errorf("state = %q after cancel", st)
	}
	if b := mustRead(t, filepath.Join(dir, "updated_at")); string(b) != "2026-03-30T12:01:30Z\n" {
		t.Errorf("updated_at = %q", b)
	}
	if err := f.SetSessionState(s, "gone", t0); err == nil {
		t.Errorf("an invalid state was written")
	}
	// A root's session has no output/.
	root := ctxfs.Session{Owner: owned(), Agent: "coder", ID: "default"}
	if err := f.CreateSession(ctxfs.SessionParams{Session: root, AgentID: 1, Now: t0}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(f.Dir(root), "output")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a root session has output/: %v", err)
	}
	for name, bad := range map[string]ctxfs.SessionParams{
		"dotdot agent":  {Session: ctxfs.Session{Owner: owned(), Agent: "..", ID: "s"}, AgentID: 1},
		"slash sid":     {Session: ctxfs.Session{Owner: owned(), Agent: "a", ID: "a/b"}, AgentID: 1},
		"no id":         {Session: ctxfs.Session{Owner: owned(), Agent: "a", ID: "s"}},
		"bad uid":       {Session: ctxfs.Session{Owner: ctxfs.Owner{UID: -5}, Agent: "a", ID: "s"}, AgentID: 1},
		"context slash": {Session: ctxfs.Session{Owner: owned(), Agent: "a", ID: "s"}, AgentID: 1, Context: []ctxfs.File{{Name: "../x"}}},
		"context dup":   {Session: ctxfs.Session{Owner: owned(), Agent: "a", ID: "s"}, AgentID: 1, Handoff: []byte{}, Context: []ctxfs.File{{Name: "handoff.md"}}},
		"bad state":     {Session: ctxfs.Session{Owner: owned(), Agent: "a", ID: "s"}, AgentID: 1, State: "zombie"},
	} {
		if err := f.CreateSession(bad); err == nil {
			t.Errorf("%s: CreateSession succeeded", name)
		}
	}
	assertNoTemps(t, f.Root)
}
