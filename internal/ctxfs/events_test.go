package ctxfs_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kin-agents/kin/internal/ctxfs"
)

func newSession(t *testing.T) (*ctxfs.FS, ctxfs.Session) {
	t.Helper()
	f := openFS(t, t.TempDir(), ctxfs.Options{})
	s := ctxfs.Session{Owner: ctxfs.Owner{UID: os.Getuid(), GID: os.Getgid()}, Agent: "coder", ID: ctxfs.DefaultSession}
	if err := f.CreateSession(ctxfs.SessionParams{Session: s, AgentID: 1, Now: t0}); err != nil {
		t.Fatal(err)
	}
	return f, s
}

// AppendEvents writes whole lines at once, and LastEventSeq reads back the
// seq of the last one (0 for an empty file).
func TestAppendEventsAndLastSeq(t *testing.T) {
	f, s := newSession(t)
	if seq, err := f.LastEventSeq(s); err != nil || seq != 0 {
		t.Fatalf("empty events.jsonl: %d, %v", seq, err)
	}
	if err := f.AppendEvents(s, [][]byte{[]byte(`{"seq":3, "type":"a"}`), []byte(" {\"seq\":7,\"type\":\"b\"}\n")}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(f.Dir(s), ctxfs.FileEvents))
	if err != nil || string(b) != "{\"seq\":3,\"type\":\"a\"}\n{\"seq\":7,\"type\":\"b\"}\n" {
		t.Fatalf("events.jsonl = %q, %v", b, err)
	}
	if seq, err := f.LastEventSeq(s); err != nil || seq != 7 {
		t.Fatalf("last seq = %d, %v", seq, err)
	}
}

// A batch with one bad event writes nothing.
func TestAppendEventsRefusesWholeBatch(t *testing.T) {
	f, s := newSession(t)
	for _, bad := range [][][]byte{
		{[]byte(`{"seq":1}`), []byte(`[1]`)},
		{[]byte(`{"seq":1}`), []byte(`{"seq":`)},
		{[]byte(`{"seq":1}`), []byte(`{"x":"` + strings.Repeat("y", ctxfs.MaxEventLine) + `"}`)},
	} {
		if err := f.AppendEvents(s, bad); err == nil {
			t.Errorf("appended %d bytes of a bad batch", len(bad[1]))
		}
	}
	if b, _ := os.ReadFile(filepath.Join(f.Dir(s), ctxfs.FileEvents)); len(b) != 0 {
		t.Fatalf("events.jsonl = %q", b)
	}
}

// OpenDir never follows a link on the way, so an agent cannot point the
// daemon elsewhere by replacing a folder of its session with a symlink.
func TestOpenDirRefusesSymlinks(t *testing.T) {
	f, s := newSession(t)
	ctxDir := filepath.Join(f.Dir(s), "context")
	if d, err := f.OpenDir(ctxDir); err != nil {
		t.Fatal(err)
	} else {
		d.Close()
	}
	elsewhere := t.TempDir()
	if err := os.RemoveAll(ctxDir); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, ctxDir); err != nil {
		t.Fatal(err)
	}
	if d, err := f.OpenDir(ctxDir); err == nil {
		d.Close()
		t.Fatal("OpenDir followed a symlink")
	} else if !errors.Is(err, ctxfs.ErrSymlink) {
		t.Logf("error: %v", err)
	}
	if _, err := f.OpenDir(filepath.Join(t.TempDir(), "outside")); err == nil {
		t.Fatal("OpenDir opened a path outside the root")
	}
}
