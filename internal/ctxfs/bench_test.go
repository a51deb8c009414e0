package ctxfs_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/kin-agents/kin/internal/ctxfs"
	"github.com/kin-agents/kin/kin"
)

// The floor: one durable file replacement done by hand (temp file, write,
// fsync, rename, fsync of the directory). Compare the others with it in the
// same run; absolute figures drift on these machines.
func BenchmarkFloorDurableFile(b *testing.B) {
	dir := b.TempDir()
	d, err := os.Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	for i := 0; b.Loop(); i++ {
		tmp := filepath.Join(dir, ".x.tmp")
		f, err := os.Create(tmp)
		if err != nil {
			b.Fatal(err)
		}
		fmt.Fprintf(f, "%d\n", i)
		f.Sync()
		f.Close()
		os.Rename(tmp, filepath.Join(dir, "x"))
		d.Sync()
	}
}

// BenchmarkNewAgent is what a spawn costs in files: a new control
// directory and a new session.
func BenchmarkNewAgent(b *testing.B) {
	f, err := ctxfs.Open(b.TempDir(), ctxfs.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	o := ctxfs.Owner{UID: os.Getuid(), GID: os.Getgid()}
	for i := 0; b.Loop(); i++ {
		name := fmt.Sprintf("a%d", i)
		a := agentFixture(kin.AgentID(i+1), name, 0, 100)
		v, err := ctxfs.ControlFor(a, runtimeFixture(o, ctxfs.ParentRef{}, a.ID))
		if err != nil {
			b.Fatal(err)
		}
		if err := f.WriteControl(name, v); err != nil {
			b.Fatal(err)
		}
		s := ctxfs.Session{Owner: o, Agent: name, ID: ctxfs.DefaultSession}
		if err := f.CreateSession(ctxfs.SessionParams{Session: s, AgentID: a.ID, Now: t0}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStatusChange rewrites an agent's control files after a status
// change: two files change (status, meta.json), seventeen are compared.
func BenchmarkStatusChange(b *testing.B) {
	f, err := ctxfs.Open(b.TempDir(), ctxfs.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	o := ctxfs.Owner{UID: os.Getuid(), GID: os.Getgid()}
	a := agentFixture(1, "coder", 0, 100)
	statuses := []kin.Status{kin.StatusActive, kin.StatusSuspended}
	for i := 0; b.Loop(); i++ {
		a.Status = statuses[i%2]
		v, _ := ctxfs.ControlFor(a, runtimeFixture(o, ctxfs.ParentRef{}, 1))
		if err := f.WriteControl("coder", v); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendEvent(b *testing.B) {
	f, err := ctxfs.Open(b.TempDir(), ctxfs.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	s := ctxfs.Session{Owner: ctxfs.Owner{UID: os.Getuid(), GID: os.Getgid()}, Agent: "coder", ID: "default"}
	if err := f.CreateSession(ctxfs.SessionParams{Session: s, AgentID: 1, Now: t0}); err != nil {
		b.Fatal(err)
	}
	ev := []byte(`{"seq":1,"time":"2026-03-30T12:00:00Z","type":"agent.started","agent":1,"pid":4242}`)
	for b.Loop() {
		if err := f.AppendEvent(s, ev); err != nil {
			b.Fatal(err)
		}
	}
}
