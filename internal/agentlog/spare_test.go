package agentlog_test

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/agentlog"
)

// spares lists the kept pipes in dir with their inodes.
func spares(t *testing.T, dir string) map[string]uint64 {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for _, e := range ents {
		if agentlog.IsSpare(e.Name()) {
			fi, err := os.Lstat(filepath.Join(dir, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode()&os.ModeNamedPipe == 0 || fi.Mode().Perm() != 0o600 {
				t.Errorf("kept pipe %s: mode %v, want a named pipe 0600", e.Name(), fi.Mode())
			}
			out[e.Name()] = fi.Sys().(*syscall.Stat_t).Ino
		}
	}
	return out
}

// TestEndedPipeKeptForTheNextAgent (issue 22): an agent's pipe, once its
// drain read end of file, is not removed but kept under a spare name, and
// the next Open in that directory renames it into place instead of making
// a new inode (no inode allocated, none freed); the next agent's log gets
// only its own output, through a drain that parks and wakes as any; a
// stale file at the new pipe's path is replaced; Close removes the spares.
// Both with the drains parked (their pipes held, watched) and not.
func TestEndedPipeKeptForTheNextAgent(t *testing.T) {
	for _, parked := range []bool{false, true} {
		t.Run(fmt.Sprintf("parked=%v", parked), func(t *testing.T) {
			p, err := agentlog.NewPoller()
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			if parked {
				if !p.Holding() {
					t.Skip("no pipe holder here")
				}
				p.SetSweepInterval(5 * time.Millisecond)
			}
			dir := t.TempDir()
			logOf := func(i int) string { return filepath.Join(dir, fmt.Sprintf("%d.log", i)) }
			read := func(i int) string { b, _ := os.ReadFile(logOf(i)); return string(b) }
			open := func(i int) (*agentlog.Drain, *os.File) {
				d, out, err := p.Open(agentlog.Config{Path: logOf(i), Bytes: 1 << 20, Keep: 1})
				if err != nil {
					t.Fatal(err)
				}
				return d, out
			}
			// Parked, a drain holds no descriptor: the test's own copy of
			// the agent's end is the one left.
			waitParked := func(i int, base int) {
				if parked {
					waitFor(t, fmt.Sprintf("agent %d's drain to park", i), func() bool { return openFDs(t) <= base+1 })
				}
			}
			base := openFDs(t)
			d1, out1 := open(1)
			out1.Write([]byte("one\n"))
			waitFor(t, "agent 1's output", func() bool { return read(1) == "one\n" })
			waitParked(1, base)
			out1.Write([]byte("one again\n"))
			out1.Close()
			<-d1.Done()
			if _, err := os.Lstat(agentlog.PipePath(logOf(1))); !os.IsNotExist(err) {
				t.Fatalf("agent 1's pipe after its end: %v", err)
			}
			kept := spares(t, dir)
			if len(kept) != 1 {
				t.Fatalf("kept pipes after an end: %v, want one", kept)
			}
			// A stale file where agent 2's pipe goes is replaced.
			if err := os.WriteFile(agentlog.PipePath(logOf(2)), []byte("stale"), 0o600); err != nil {
				t.Fatal(err)
			}
			base = openFDs(t)
			d2, out2 := open(2)
			fi, err := os.Lstat(agentlog.PipePath(logOf(2)))
			if err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
				t.Fatalf("agent 2's pipe: %v %v", fi, err)
			}
			for _, ino := range kept {
				if got := fi.Sys().(*syscall.Stat_t).Ino; got != ino {
					t.Errorf("agent 2's pipe is inode %d, want the kept one %d", got, ino)
				}
			}
			if left := spares(t, dir); len(left) != 0 {
				t.Errorf("kept pipes after a reuse: %v", left)
			}
			out2.Write([]byte("two\n"))
			waitFor(t, "agent 2's output", func() bool { return read(2) == "two\n" })
			waitParked(2, base)
			out2.Write([]byte("two again\n"))
			out2.Close()
			<-d2.Done()
			if got := read(1); got != "one\none again\n" {
				t.Errorf("agent 1's log: %q", got)
			}
			if got := read(2); got != "two\ntwo again\n" {
				t.Errorf("agent 2's log: %q", got)
			}
			if n := len(spares(t, dir)); n != 1 {
				t.Errorf("%d kept pipes after agent 2's end, want 1", n)
			}
			p.Close()
			if left := spares(t, dir); len(left) != 0 {
				t.Errorf("kept pipes after Close: %v", left)
			}
		})
	}
}

// TestPipeReadElsewhereIsNotKept: an ended agent's pipe that some other
// process still holds open for reading (here the agent's own end reopened
// read-only through /proc, as an agent could, and kept) is removed, not
// kept: the next agent gets a pipe of its own, and that descriptor reads
// none of its output.
func TestPipeReadElsewhereIsNotKept(t *testing.T) {
	p := newPoller(t)
	dir := t.TempDir()
	logOf := func(i int) string { return filepath.Join(dir, fmt.Sprintf("%d.log", i)) }
	d1, out1, err := p.Open(agentlog.Config{Path: logOf(1), Bytes: 1 << 20, Keep: 1})
	if err != nil {
		t.Fatal(err)
	}
	kept, err := os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", out1.Fd()), os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer kept.Close()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(kept.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	out1.Close()
	<-d1.Done()
	if left := spares(t, dir); len(left) != 0 {
		t.Fatalf("a pipe another process reads was kept: %v", left)
	}
	if _, err := os.Lstat(agentlog.PipePath(logOf(1))); !os.IsNotExist(err) {
		t.Fatalf("agent 1's pipe after its end: %v", err)
	}
	d2, out2, err := p.Open(agentlog.Config{Path: logOf(2), Bytes: 1 << 20, Keep: 1})
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(agentlog.PipePath(logOf(2)))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Sys().(*syscall.Stat_t).Ino == st.Ino {
		t.Fatalf("agent 2's pipe is agent 1's (inode %d), which another process reads", st.Ino)
	}
	out2.Write([]byte("two\n"))
	out2.Close()
	<-d2.Done()
	if b, _ := os.ReadFile(logOf(2)); string(b) != "two\n" {
		t.Fatalf("agent 2's log: %q", b)
	}
	if n, err := kept.Read(make([]byte, 64)); n != 0 {
		t.Fatalf("the kept descriptor read %d bytes of agent 2's output (%v)", n, err)
	}
}

// TestManyEndsKeptTogether: pipes whose drains end at once (a cascade's)
// are each kept once, under names of their own, none left at its agent's
// path; the next Opens take them; Close removes the rest.
func TestManyEndsKeptTogether(t *testing.T) {
	p, err := agentlog.NewPoller()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	dir := t.TempDir()
	const n = 64
	var ds []*agentlog.Drain
	var outs []*os.File
	for i := range n {
		d, out, err := p.Open(agentlog.Config{Path: filepath.Join(dir, fmt.Sprintf("%d.log", i)), Bytes: 1 << 20, Keep: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer out.Close()
		ds, outs = append(ds, d), append(outs, out)
	}
	for _, out := range outs {
		out.Close()
	}
	for _, d := range ds {
		<-d.Done()
	}
	for i := range n {
		if _, err := os.Lstat(agentlog.PipePath(filepath.Join(dir, fmt.Sprintf("%d.log", i)))); !os.IsNotExist(err) {
			t.Errorf("agent %d's pipe after its end: %v", i, err)
		}
	}
	kept := spares(t, dir)
	if len(kept) != n {
		t.Fatalf("%d kept pipes after %d ends", len(kept), n)
	}
	inos := map[uint64]bool{}
	for _, ino := range kept {
		inos[ino] = true
	}
	d, out, err := p.Open(agentlog.Config{Path: filepath.Join(dir, "next.log"), Bytes: 1 << 20, Keep: 1})
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(agentlog.PipePath(filepath.Join(dir, "next.log")))
	if err != nil || !inos[fi.Sys().(*syscall.Stat_t).Ino] {
		t.Errorf("the next agent's pipe is not a kept one: %v %v", fi, err)
	}
	out.Close()
	<-d.Done()
	p.Close()
	if left := spares(t, dir); len(left) != 0 {
		t.Errorf("%d kept pipes after Close", len(left))
	}
}

// TestHeldPipesRetiredTogether: drains held (HoldRetire) end once their
// output is copied, their pipes still at their paths and still held by
// the drains (their release waits too); Retire then lets go of each and
// keeps it (renamed, none left at an agent's path). A drain released before it
// ends retires its pipe itself when it ends, and a held drain detached
// leaves its pipe for the next daemon.
func TestHeldPipesRetiredTogether(t *testing.T) {
	p, err := agentlog.NewPoller()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	dir := t.TempDir()
	logOf := func(i int) string { return filepath.Join(dir, fmt.Sprintf("%d.log", i)) }
	const n = 16
	var ds []*agentlog.Drain
	var outs []*os.File
	for i := range n + 2 {
		d, out, err := p.Open(agentlog.Config{Path: logOf(i), Bytes: 1 << 20, Keep: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer out.Close()
		d.HoldRetire()
		ds, outs = append(ds, d), append(outs, out)
	}
	// n held drains end, each with a line in its log.
	for i := range n {
		fmt.Fprintf(outs[i], "line %d\n", i)
		outs[i].Close()
	}
	for i := range n {
		<-ds[i].Done()
		if b, err := os.ReadFile(logOf(i)); err != nil || string(b) != fmt.Sprintf("line %d\n", i) {
			t.Fatalf("log %d at its drain's end: %q, %v", i, b, err)
		}
		if fi, err := os.Lstat(agentlog.PipePath(logOf(i))); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
			t.Fatalf("held pipe %d after its drain's end: %v, %v", i, fi, err)
		}
		// Held by the holder (a drain that ended held closed its own read
		// end): without one, nothing holds it.
		if p.Holding() && !hasReader(t, agentlog.PipePath(logOf(i))) {
			t.Fatalf("held pipe %d was let go of at its drain's end, not at Retire", i)
		}
	}
	if kept := spares(t, dir); len(kept) != 0 {
		t.Fatalf("%d pipes kept before Retire", len(kept))
	}
	for i := range n {
		ds[i].Retire()
	}
	for i := range n {
		if _, err := os.Lstat(agentlog.PipePath(logOf(i))); !os.IsNotExist(err) {
			t.Errorf("pipe %d after Retire: %v", i, err)
		}
	}
	if kept := spares(t, dir); len(kept) != n {
		t.Fatalf("%d kept pipes after %d retired", len(kept), n)
	}
	// Released before its end: its end retires it.
	ds[n].Retire()
	outs[n].Close()
	<-ds[n].Done()
	if _, err := os.Lstat(agentlog.PipePath(logOf(n))); !os.IsNotExist(err) {
		t.Errorf("pipe released before its end, after its end: %v", err)
	}
	if kept := spares(t, dir); len(kept) != n+1 {
		t.Fatalf("%d kept pipes, want %d", len(kept), n+1)
	}
	// Held and detached: left where it is, and Retire keeps it there.
	ds[n+1].Detach()
	ds[n+1].Retire()
	if fi, err := os.Lstat(agentlog.PipePath(logOf(n + 1))); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("a detached drain's pipe: %v, %v", fi, err)
	}
}

// TestHeldPipeLetGoAtClose: a drain that ended held, whose Retire never
// came, lets go of its pipe at the poller's Close, which leaves the pipe at
// its path (for the next daemon, which removes it: no agent of its).
func TestHeldPipeLetGoAtClose(t *testing.T) {
	p := newPoller(t)
	log := filepath.Join(t.TempDir(), "a.log")
	d, out, err := p.Open(agentlog.Config{Path: log, Bytes: 1 << 20, Keep: 1})
	if err != nil {
		t.Fatal(err)
	}
	d.HoldRetire()
	out.Close()
	<-d.Done()
	pipe := agentlog.PipePath(log)
	if p.Holding() && !hasReader(t, pipe) { // in the holder (see TestHeldPipesRetiredTogether)
		t.Fatal("the held pipe was let go of at its drain's end")
	}
	p.Close()
	if hasReader(t, pipe) {
		t.Error("the held pipe is still held after the poller's Close")
	}
	if fi, err := os.Lstat(pipe); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("the pipe after Close: %v, %v", fi, err)
	}
	d.Retire() // after Close: nothing left to let go of
}

// hasReader reports whether the named pipe at path is open for reading
// somewhere: a non-blocking open for writing fails with ENXIO exactly
// when it is not.
func hasReader(t *testing.T, path string) bool {
	t.Helper()
	fd, err := syscall.Open(path, syscall.O_WRONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err == nil {
		syscall.Close(fd)
		return true
	}
	if err != syscall.ENXIO {
		t.Fatalf("open %s for writing: %v", path, err)
	}
	return false
}

// TestRetireRacingTheEnd: Retire coming just as a held drain ends (after
// it saw the hold, before its end) lets go of the pipe once, by whichever
// of the two comes last: no holder slot twice in the free list, and the
// pipe retired either way.
func TestRetireRacingTheEnd(t *testing.T) {
	p := newPoller(t)
	dir := t.TempDir()
	for i := range 300 {
		log := filepath.Join(dir, fmt.Sprintf("%d.log", i))
		d, out, err := p.Open(agentlog.Config{Path: log, Bytes: 1 << 20, Keep: 1})
		if err != nil {
			t.Fatal(err)
		}
		d.HoldRetire()
		out.Close()
		// A little later each time, up to 50 µs: before, at and after
		// the drain's end.
		for until := time.Now().Add(time.Duration(i%51) * time.Microsecond); time.Now().Before(until); {
		}
		d.Retire()
		<-d.Done()
		free := p.FreeSlots()
		seen := map[uint32]bool{}
		for _, s := range free {
			if seen[s] {
				t.Fatalf("iteration %d: slot %d twice in the free list %v", i, s, free)
			}
			seen[s] = true
		}
		if _, err := os.Lstat(agentlog.PipePath(log)); !os.IsNotExist(err) {
			t.Fatalf("iteration %d: the pipe after its end and Retire: %v", i, err)
		}
	}
}
