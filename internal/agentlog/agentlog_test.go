package agentlog_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kin-agents/kin/internal/agentlog"
)

// waitFor polls cond until it holds or the deadline passes (no sleeps
// that guess a duration).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// newPoller is a poller the test's end closes.
func newPoller(t testing.TB) *agentlog.Poller {
	t.Helper()
	p, err := agentlog.NewPoller()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func lines(from, to int) []byte {
	var b bytes.Buffer
	for i := from; i < to; i++ {
		fmt.Fprintf(&b, "line %06d\n", i)
	}
	return b.Bytes()
}

// onDisk is the total size of the log's files, and the files themselves.
func onDisk(t *testing.T, path string) (int64, []string) {
	t.Helper()
	m, _ := filepath.Glob(path + "*")
	var n int64
	for _, p := range m {
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().IsRegular() {
			n += fi.Size()
			if fi.Mode().Perm() != 0o600 {
				t.Errorf("%s has mode %v, want 0600", p, fi.Mode().Perm())
			}
		}
	}
	return n, m
}

func readAll(t *testing.T, path string, offset, tail int64) []byte {
	t.Helper()
	r := agentlog.NewReader(path, offset, tail)
	defer r.Close()
	var got bytes.Buffer
	if err := r.ReadAvailable(make([]byte, 777), func(b []byte) error { got.Write(b); return nil }); err != nil {
		t.Fatal(err)
	}
	return got.Bytes()
}

// TestDrainRotates: 1 MiB written through the pipe leaves at most
// Bytes × (1 + Keep) on disk, exactly the newest bytes, readable as one
// stream; the pipe is removed once the writer is gone.
func TestDrainRotates(t *testing.T) {
	path := filepath.Join(t.TempDir(), "7.log")
	d, out, err := newPoller(t).Open(agentlog.Config{Path: path, Bytes: 4096, Keep: 2})
	if err != nil {
		t.Fatal(err)
	}
	all := lines(0, 1<<20/12)
	if _, err := out.Write(all); err != nil {
		t.Fatal(err)
	}
	out.Close()
	<-d.Done()
	if _, err := os.Lstat(agentlog.PipePath(path)); !os.IsNotExist(err) {
		t.Fatalf("the pipe is left behind: %v", err)
	}
	n, files := onDisk(t, path)
	if n > 3*4096 || n <= 2*4096 || len(files) != 3 {
		t.Fatalf("on disk: %d bytes in %v, want 3 files, at most 4096 each", n, files)
	}
	got := readAll(t, path, 0, 0)
	if int64(len(got)) != n || !bytes.Equal(got, all[len(all)-len(got):]) {
		t.Fatalf("the log is not the newest %d bytes written", n)
	}
	// Tail and offset count across the files.
	if got := readAll(t, path, 0, 5000); !bytes.Equal(got, all[len(all)-5000:]) {
		t.Fatalf("tail 5000 = %d bytes", len(got))
	}
	if got := readAll(t, path, 4096+10, 0); !bytes.Equal(got, all[len(all)-int(n)+4096+10:]) {
		t.Fatalf("offset 4106 = %d bytes", len(got))
	}
	if got := readAll(t, path, 1<<30, 0); len(got) != 0 {
		t.Fatalf("offset past the end = %d bytes", len(got))
	}
}

// TestKeepZero: without rotated files only the current one is kept.
func TestKeepZero(t *testing.T) {
	path := filepath.Join(t.TempDir(), "1.log")
	d, out, err := newPoller(t).Open(agentlog.Config{Path: path, Bytes: 4096, Keep: 0})
	if err != nil {
		t.Fatal(err)
	}
	all := lines(0, 5000)
	out.Write(all)
	out.Close()
	<-d.Done()
	if n, files := onDisk(t, path); n > 4096 || len(files) != 1 {
		t.Fatalf("on disk: %d bytes in %v", n, files)
	}
	if got := readAll(t, path, 0, 0); !bytes.HasSuffix(all, got) || len(got) == 0 {
		t.Fatalf("the log is not the end of what was written (%d bytes)", len(got))
	}
}

// TestFullLogRotatedOnlyWhenMoreComes: output that ends exactly at the
// size stays in the log, even with no rotated file kept; the next byte
// rotates it, and a drain started on a full log (a restart) rotates it only
// then too.
func TestFullLogRotatedOnlyWhenMoreComes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "5.log")
	c := agentlog.Config{Path: path, Bytes: 64 << 10, Keep: 0}
	d, out, err := newPoller(t).Open(c)
	if err != nil {
		t.Fatal(err)
	}
	all := bytes.Repeat([]byte("0123456789abcdef"), 64<<10/16)
	if _, err := out.Write(all); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the drain to empty the pipe", func() bool { n, err := unix.IoctlGetInt(int(out.Fd()), unix.TIOCINQ); return err == nil && n == 0 })
	d.Detach()
	// A new drain on the full log (as after a restart), then the end of
	// the output: nothing more came, so nothing is rotated.
	d, err = newPoller(t).Reattach(c)
	if err != nil {
		t.Fatal(err)
	}
	out.Close()
	<-d.Done()
	if b, _ := os.ReadFile(path); !bytes.Equal(b, all) {
		t.Fatalf("%d bytes written, ending at the size of the log: the log keeps %d of them", len(all), len(b))
	}
	// One more byte rotates it.
	d, out, err = newPoller(t).Open(c)
	if err != nil {
		t.Fatal(err)
	}
	out.Write([]byte("!"))
	out.Close()
	<-d.Done()
	if b, _ := os.ReadFile(path); string(b) != "!" {
		t.Fatalf("after one more byte the log is %d bytes, want that byte", len(b))
	}
}

// TestReadKeptEnds: a read that is not a follow ends with what the log
// held when it began, although the writer rotates the log many times
// while it reads: it never reads more than is kept, nor anything written
// after it began.
func TestReadKeptEnds(t *testing.T) {
	path := filepath.Join(t.TempDir(), "4.log")
	d, out, err := newPoller(t).Open(agentlog.Config{Path: path, Bytes: 4096, Keep: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { out.Close(); <-d.Done() }()
	first := lines(0, 1000) // 12,000 bytes: two rotations, 8,192 kept
	out.Write(first)
	drained := func() bool { n, err := unix.IoctlGetInt(int(out.Fd()), unix.TIOCINQ); return err == nil && n == 0 }
	waitFor(t, "the drain to take the first lines", drained)
	kept, _ := onDisk(t, path)
	r := agentlog.NewReader(path, 0, 0)
	defer r.Close()
	var got bytes.Buffer
	late := bytes.Repeat([]byte("LATE\n"), 20000) // 100,000 bytes: 24 rotations
	err = r.ReadKept(make([]byte, 1000), func(b []byte) error {
		if got.Len() == 0 { // the writer goes on while the reader is slow
			out.Write(late)
			waitFor(t, "the drain to take the late lines", drained)
		}
		got.Write(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if int64(got.Len()) > kept || !bytes.Contains(first, got.Bytes()) || got.Len() == 0 {
		t.Fatalf("read %d bytes of a log of %d when the read began: not a piece of what it held then (late lines: %v)",
			got.Len(), kept, bytes.Contains(got.Bytes(), []byte("LATE")))
	}
	// Undisturbed, it reads all that is kept, from an offset or a tail.
	all, _ := onDisk(t, path)
	for _, c := range []struct{ offset, tail, want int64 }{{0, 0, all}, {100, 0, all - 100}, {0, 5000, 5000}, {all + 1, 0, 0}} {
		r := agentlog.NewReader(path, c.offset, c.tail)
		var n int64
		if err := r.ReadKept(make([]byte, 777), func(b []byte) error { n += int64(len(b)); return nil }); err != nil {
			t.Fatal(err)
		}
		r.Close()
		if n != c.want {
			t.Errorf("offset %d, tail %d: read %d bytes, want %d", c.offset, c.tail, n, c.want)
		}
	}
}

// TestFollowAcrossRotations: a reader that keeps up with the writer sees
// every byte once, in order, although the log was rotated many times.
func TestFollowAcrossRotations(t *testing.T) {
	path := filepath.Join(t.TempDir(), "3.log")
	d, out, err := newPoller(t).Open(agentlog.Config{Path: path, Bytes: 4096, Keep: 1})
	if err != nil {
		t.Fatal(err)
	}
	r := agentlog.NewReader(path, 0, 0)
	defer r.Close()
	var want, got bytes.Buffer
	buf := make([]byte, 1000)
	for i := 0; i < 60; i++ {
		chunk := lines(i*100, i*100+100) // 1,200 bytes: a rotation every 3-4 chunks
		out.Write(chunk)
		want.Write(chunk)
		waitFor(t, "the reader to catch up", func() bool {
			if err := r.ReadAvailable(buf, func(b []byte) error { got.Write(b); return nil }); err != nil {
				t.Fatal(err)
			}
			return got.Len() >= want.Len()
		})
	}
	out.Close()
	<-d.Done()
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Fatalf("followed %d bytes, wrote %d; they differ", got.Len(), want.Len())
	}
}

// TestReattach: while no daemon drains the pipe, the writer's output waits
// in it (more than the pipe holds: the writes block, they do not fail); a
// new drain on the same path copies all of it.
func TestReattach(t *testing.T) {
	path := filepath.Join(t.TempDir(), "9.log")
	c := agentlog.Config{Path: path, Bytes: 1 << 30, Keep: 1}
	d, out, err := newPoller(t).Open(c)
	if err != nil {
		t.Fatal(err)
	}
	first := lines(0, 100)
	out.Write(first)
	waitFor(t, "the first lines in the log", func() bool {
		b, _ := os.ReadFile(path)
		return len(b) == len(first)
	})
	d.Detach()
	if _, err := os.Lstat(agentlog.PipePath(path)); err != nil {
		t.Fatalf("Detach removed the pipe: %v", err)
	}
	// 3 MiB: more than the pipe holds, so the writer blocks until drained.
	second := lines(100, 100+3<<20/12)
	wrote := make(chan error, 1)
	go func() {
		_, err := out.Write(second)
		out.Close()
		wrote <- err
	}()
	d2, err := newPoller(t).Reattach(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-wrote; err != nil {
		t.Fatalf("a write while nobody drained failed: %v", err)
	}
	<-d2.Done()
	b, _ := os.ReadFile(path)
	if !bytes.Equal(b, append(first, second...)) {
		t.Fatalf("after reattaching: %d bytes, want %d", len(b), len(first)+len(second))
	}
	if _, err := newPoller(t).Reattach(c); !os.IsNotExist(err) {
		t.Fatalf("reattach without a pipe: %v", err)
	}
}

// TestIdleDrainsHoldNoGoroutine: 200 agents' pipes, all empty, cost the
// poller's one goroutine, not one each; output on any of them still
// reaches its log, and an idle drain detaches at once.
func TestIdleDrainsHoldNoGoroutine(t *testing.T) {
	dir := t.TempDir()
	before := runtime.NumGoroutine()
	p := newPoller(t)
	var ds []*agentlog.Drain
	var outs []*os.File
	for i := range 200 {
		d, out, err := p.Open(agentlog.Config{Path: filepath.Join(dir, fmt.Sprintf("%d.log", i)), Bytes: 1 << 20, Keep: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer out.Close()
		ds, outs = append(ds, d), append(outs, out)
	}
	waitFor(t, "the drains' first steps to end", func() bool { return runtime.NumGoroutine() <= before+1 })
	for _, i := range []int{7, 199, 0} {
		msg := fmt.Sprintf("hello from %d\n", i)
		outs[i].Write([]byte(msg))
		waitFor(t, "the output in its log", func() bool {
			b, _ := os.ReadFile(filepath.Join(dir, fmt.Sprintf("%d.log", i)))
			return string(b) == msg
		})
	}
	outs[3].Close()
	<-ds[3].Done() // the end: no writer left
	if _, err := os.Lstat(agentlog.PipePath(filepath.Join(dir, "3.log"))); !os.IsNotExist(err) {
		t.Errorf("the ended drain's pipe: %v, want it removed", err)
	}
	ds[5].Detach()
	if _, err := os.Lstat(agentlog.PipePath(filepath.Join(dir, "5.log"))); err != nil {
		t.Errorf("Detach removed the pipe: %v", err)
	}
	waitFor(t, "the drains' goroutines to end", func() bool { return runtime.NumGoroutine() <= before+1 })
}

// TestLogFileMadeAtFirstOutput: an agent that writes nothing leaves no log
// file (its spawn made one inode in the log directory, its pipe, not two),
// and reading its log gives nothing, not an error; an agent's log file is
// made when its first byte comes, and a reader that began before it
// existed reads it then.
func TestLogFileMadeAtFirstOutput(t *testing.T) {
	dir := t.TempDir()
	p := newPoller(t)
	silent := filepath.Join(dir, "1.log")
	d, out, err := p.Open(agentlog.Config{Path: silent, Bytes: 4096, Keep: 1})
	if err != nil {
		t.Fatal(err)
	}
	out.Close()
	<-d.Done()
	if _, err := os.Lstat(silent); !os.IsNotExist(err) {
		t.Fatalf("a log file for an agent that wrote nothing: %v", err)
	}
	if _, err := os.Lstat(agentlog.PipePath(silent)); !os.IsNotExist(err) {
		t.Fatalf("the pipe is left behind: %v", err)
	}
	if got := readAll(t, silent, 0, 0); len(got) != 0 {
		t.Fatalf("read %q from a log never written", got)
	}

	late := filepath.Join(dir, "2.log")
	d, out, err = p.Open(agentlog.Config{Path: late, Bytes: 4096, Keep: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	r := agentlog.NewReader(late, 0, 0)
	defer r.Close()
	var got bytes.Buffer
	follow := func() {
		if err := r.ReadAvailable(make([]byte, 64), func(b []byte) error { got.Write(b); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	follow()
	if got.Len() != 0 {
		t.Fatalf("read %q before any output", got.Bytes())
	}
	if _, err := out.Write([]byte("first words\n")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the first output in the log", func() bool {
		follow()
		return got.String() == "first words\n"
	})
	out.Close()
	<-d.Done()
	if b, err := os.ReadFile(late); err != nil || string(b) != "first words\n" {
		t.Fatalf("log = %q, %v", b, err)
	}
}

// TestOpenReplacesAStalePipe: a file a crash left where a new agent's pipe
// goes (a pipe, or anything else but a non-empty directory) is replaced by
// a new pipe; a directory holding something is not removed, and the open
// fails.
func TestOpenReplacesAStalePipe(t *testing.T) {
	dir := t.TempDir()
	p := newPoller(t)
	stale := filepath.Join(dir, "1.log")
	if err := os.WriteFile(agentlog.PipePath(stale), []byte("stale"), 0o644); err != nil {
		t.Fatal(err)
	}
	d, out, err := p.Open(agentlog.Config{Path: stale, Bytes: 4096, Keep: 1})
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(agentlog.PipePath(stale))
	if err != nil || fi.Mode()&os.ModeNamedPipe == 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the pipe: %v, %v", fi, err)
	}
	if _, err := out.Write([]byte("new\n")); err != nil {
		t.Fatal(err)
	}
	out.Close()
	<-d.Done()
	if b, err := os.ReadFile(stale); err != nil || string(b) != "new\n" {
		t.Fatalf("log = %q, %v", b, err)
	}

	blocked := filepath.Join(dir, "2.log")
	if err := os.MkdirAll(filepath.Join(agentlog.PipePath(blocked), "keep"), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, _, err := p.Open(agentlog.Config{Path: blocked, Bytes: 4096, Keep: 1}); err == nil {
		t.Fatal("opened a log whose pipe's place holds a directory")
	}
	if _, err := os.Stat(filepath.Join(agentlog.PipePath(blocked), "keep")); err != nil {
		t.Fatalf("the directory's content: %v", err)
	}
}
