package ctxfs_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/ctxfs"
)

// TestRepairFillsOnlyWhatACrashEmptied: RepairSession and RepairChildDir
// write the files that are missing or empty, leave the rest as they are
// (what an agent or kin wrote since), and refuse a link planted where a
// file belongs.
func TestRepairFillsOnlyWhatACrashEmptied(t *testing.T) {
	root := t.TempDir()
	f := openFS(t, root, ctxfs.Options{NoSync: true})
	o := ctxfs.Owner{UID: os.Getuid(), GID: os.Getgid()}
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	parent := ctxfs.Session{Owner: o, Agent: "coder", ID: ctxfs.DefaultSession}
	if err := f.CreateSession(ctxfs.SessionParams{Session: parent, AgentID: 1, Cwd: "/work", Now: t0}); err != nil {
		t.Fatal(err)
	}
	child := ctxfs.Session{Owner: o, Agent: "rev", ID: ctxfs.DefaultSession}
	sp := ctxfs.SessionParams{Session: child, AgentID: 2, Run: "r2", Parent: ctxfs.ParentRef{Agent: "coder", Session: "default", Run: "r1"},
		Cwd: "/work/rev", Now: t0, Handoff: []byte("Task: review\n")}
	if err := f.CreateSession(sp); err != nil {
		t.Fatal(err)
	}
	cp := ctxfs.ChildParams{Parent: parent, Child: "rev", ChildID: 2, ChildSession: "default", Handoff: []byte("Task: review\n")}
	if err := f.CreateChildDir(cp); err != nil {
		t.Fatal(err)
	}
	sdir := f.Dir(child)
	cdir := f.ChildDir(o.UID, "coder", "default", "rev")
	want := map[string][]byte{}
	for _, p := range []string{
		filepath.Join(sdir, ctxfs.FileMeta), filepath.Join(sdir, ctxfs.FileCwd), filepath.Join(sdir, ctxfs.FileCreatedAt),
		filepath.Join(sdir, "context", ctxfs.FileHandoff),
		filepath.Join(cdir, ctxfs.FileChildAgent), filepath.Join(cdir, ctxfs.FileChildSession), filepath.Join(cdir, ctxfs.FileChildStatus),
	} {
		b, err := os.ReadFile(p)
		if err != nil || len(b) == 0 {
			t.Fatalf("%s: %q, %v", p, b, err)
		}
		want[p] = b
		if err := os.Truncate(p, 0); err != nil {
			t.Fatal(err)
		}
	}
	// What the agent wrote since stays.
	latest := filepath.Join(sdir, ctxfs.FileLatest)
	if err := os.WriteFile(latest, []byte("my summary\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	n, err := f.RepairSession(sp)
	if err != nil || n != 4 {
		t.Fatalf("RepairSession: %d files, %v; want 4", n, err)
	}
	cp.Status = ctxfs.ChildRunning
	if n, err := f.RepairChildDir(cp); err != nil || n != 3 {
		t.Fatalf("RepairChildDir: %d files, %v; want 3", n, err)
	}
	for p, b := range want {
		if got, _ := os.ReadFile(p); string(got) != string(b) {
			t.Errorf("%s: %q, want %q as written at creation", p, got, b)
		}
	}
	if got, _ := os.ReadFile(latest); string(got) != "my summary\n" {
		t.Errorf("latest.md was replaced: %q", got)
	}
	if n, err := f.RepairSession(sp); err != nil || n != 0 {
		t.Errorf("a second repair wrote %d files, %v", n, err)
	}

	// A link where meta.json belongs is refused, not followed.
	meta := filepath.Join(sdir, ctxfs.FileMeta)
	os.Remove(meta)
	if err := os.Symlink("/etc/passwd", meta); err != nil {
		t.Fatal(err)
	}
	if _, err := f.RepairSession(sp); !errors.Is(err, ctxfs.ErrNotRegular) {
		t.Errorf("a link where meta.json belongs: %v, want ErrNotRegular", err)
	}
}
