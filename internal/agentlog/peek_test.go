package agentlog_test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kin-agents/kin/internal/agentlog"
)

// TestPeekTellsTheEnd: peek says whether a byte waits in a pipe (without
// taking it), whether it is empty with a writer left (EAGAIN), or empty
// with none (0: the end), also for a named pipe opened again after its
// last writer closed, which poll(2) reports as merely empty.
func TestPeekTellsTheEnd(t *testing.T) {
	p, err := agentlog.NewPoller()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	path := filepath.Join(t.TempDir(), "p")
	if err := unix.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	open := func(flags int) int {
		t.Helper()
		fd, err := unix.Open(path, flags|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Close(fd) })
		return fd
	}
	r := open(unix.O_RDONLY | unix.O_NONBLOCK)
	w := open(unix.O_WRONLY)
	if n, err := p.Peek(r); err != unix.EAGAIN {
		t.Fatalf("empty, a writer left: %d, %v; want EAGAIN", n, err)
	}
	unix.Write(w, []byte("ab"))
	for range 3 { // a peek takes nothing
		if n, err := p.Peek(r); n != 1 || err != nil {
			t.Fatalf("two bytes waiting: %d, %v; want 1", n, err)
		}
	}
	unix.Close(w)
	if n, err := p.Peek(r); n != 1 || err != nil {
		t.Fatalf("two bytes waiting, no writer: %d, %v; want 1", n, err)
	}
	buf := make([]byte, 8)
	if n, _ := unix.Read(r, buf); string(buf[:n]) != "ab" {
		t.Fatalf("read %q after the peeks, want \"ab\"", buf[:n])
	}
	if n, err := p.Peek(r); n != 0 || err != nil {
		t.Fatalf("empty, no writer: %d, %v; want 0, nil", n, err)
	}
	// Opened again after the writer left (a parked drain's read end):
	// poll sees no hang-up, peek sees the end.
	again := open(unix.O_RDONLY | unix.O_NONBLOCK)
	pfd := []unix.PollFd{{Fd: int32(again), Events: unix.POLLIN}}
	if _, err := unix.Poll(pfd, 0); err != nil {
		t.Fatal(err)
	}
	if n, err := p.Peek(again); n != 0 || err != nil {
		t.Fatalf("opened again after the last writer: %d, %v (poll's revents %#x); want 0, nil", n, err, pfd[0].Revents)
	}
}

// TestEndedDrainOpensNoLog: a drain whose agent ended with all its output
// copied ends without opening its log again, parked or not (a cascade of
// a thousand agents saved a thousand opens of their logs). The log is
// moved away before the end: an end that opened it would make it again.
func TestEndedDrainOpensNoLog(t *testing.T) {
	p, err := agentlog.NewPoller()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.SetSweepInterval(20 * time.Millisecond)
	dir := t.TempDir()
	for _, parked := range []bool{false, true} {
		t.Run(fmt.Sprintf("parked=%v", parked), func(t *testing.T) {
			if parked && !p.Holding() {
				t.Skip("no pipe holder here (io_uring refused): drains do not park")
			}
			path := filepath.Join(dir, fmt.Sprintf("%v.log", parked))
			before := openFDs(t)
			d, out, err := p.Open(agentlog.Config{Path: path, Bytes: 1 << 20, Keep: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer out.Close()
			out.Write([]byte("all of it\n"))
			waitFor(t, "the output in the log", func() bool {
				b, _ := os.ReadFile(path)
				return string(b) == "all of it\n"
			})
			if parked {
				waitFor(t, "the drain to park", func() bool { return openFDs(t)-before <= 1 })
			}
			if err := os.Rename(path, path+".moved"); err != nil {
				t.Fatal(err)
			}
			out.Close()
			select {
			case <-d.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("the drain did not end once its writer left")
			}
			if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("the ended drain opened its log again (%v)", err)
			}
			if _, err := os.Lstat(agentlog.PipePath(path)); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("the ended drain's pipe: %v, want it removed", err)
			}
		})
	}
}
