package cgroup

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestParseMountinfo(t *testing.T) {
	const info = `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
50 23 0:38 /kin\040box /mnt/cg\040two ro,relatime shared:9 - cgroup2 cgroup2 rw
51 23 0:38 / /mnt/cg3 rw,relatime - cgroup2 cgroup2 ro
`
	got, err := parseMountinfo(strings.NewReader(info))
	if err != nil {
		t.Fatal(err)
	}
	want := []Mount{
		{Dir: "/sys/fs/cgroup/unified", Root: "/", Writable: true},
		{Dir: "/mnt/cg two", Root: "/kin box", Writable: false},
		{Dir: "/mnt/cg3", Root: "/", Writable: false},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	m, err := pickMount(want, "/kin box/a1")
	if err != nil || m.Dir != "/sys/fs/cgroup/unified" {
		t.Errorf("pickMount: %+v, %v", m, err)
	}
	if _, err := pickMount(nil, "/"); !errors.Is(err, ErrNoCgroup2) {
		t.Errorf("no mounts: %v", err)
	}
	sub := Mount{Dir: "/mnt/cg", Root: "/kin"}
	if d, ok := sub.DirOf("/kin/a1/a2"); !ok || d != "/mnt/cg/a1/a2" {
		t.Errorf("DirOf below root: %q %v", d, ok)
	}
	if _, ok := sub.DirOf("/kinx/a1"); ok {
		t.Error("DirOf matched a sibling with a common prefix")
	}
}

func TestParseProcCgroup(t *testing.T) {
	for in, want := range map[string]string{
		"9:name=systemd:/\n0::/kin-1/a1\n": "/kin-1/a1",
		"0::/kin-1/a1 (deleted)\n":         "/kin-1/a1",
		"0::/\n":                           "/",
	} {
		if got, ok := parseProcCgroup(in); !ok || got != want {
			t.Errorf("parseProcCgroup(%q) = %q, %v", in, got, ok)
		}
	}
	if _, ok := parseProcCgroup("1:cpu:/\n"); ok {
		t.Error("a v1-only file parsed")
	}
	if e := parseEvents("populated 1\nfrozen 0\n"); !e.Populated || e.Frozen {
		t.Errorf("parseEvents: %+v", e)
	}
}

// testGroup makes a group for this test under the writable cgroup2 mount,
// removed (after a kill) when the test ends.
func testGroup(t *testing.T) string {
	t.Helper()
	m, err := FindMount()
	if err != nil || !m.Writable {
		t.Skipf("no writable cgroup v2 here (%v, %+v)", err, m)
	}
	dir := filepath.Join(m.Dir, fmt.Sprintf("kin-test-cg-%d-%s", os.Getpid(), strings.ReplaceAll(t.Name(), "/", "_")))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("cgroup2 at %s is not writable: %v", m.Dir, err)
	}
	t.Cleanup(func() {
		Kill(dir)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := WaitEmpty(ctx, dir); err != nil {
			t.Error(err)
		}
		if err := RemoveTree(dir); err != nil {
			t.Error(err)
		}
		if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s left behind", dir)
		}
	})
	return dir
}

// startIn starts sleep inside dir with clone3(CLONE_INTO_CGROUP).
func startIn(t *testing.T, dir string) *exec.Cmd {
	t.Helper()
	fd, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	cmd := exec.Command("sleep", "1000")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

func TestKillFreezeWait(t *testing.T) {
	dir := testGroup(t)
	child := filepath.Join(dir, "a2")
	if err := os.Mkdir(child, 0o755); err != nil {
		t.Fatal(err)
	}
	if miss := Missing(dir); len(miss) > 0 {
		t.Fatalf("group lacks %v", miss)
	}
	c1, c2 := startIn(t, dir), startIn(t, child)
	if d, err := mustMount(t).DirOfPID(c2.Process.Pid); err != nil || d != child {
		t.Fatalf("DirOfPID: %q, %v; want %q", d, err, child)
	}
	if pids, err := Procs(dir); err != nil || len(pids) != 1 || pids[0] != c1.Process.Pid {
		t.Fatalf("Procs: %v, %v", pids, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := Freeze(ctx, dir); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{dir, child} {
		if e, _ := ReadEvents(d); !e.Frozen {
			t.Errorf("%s not frozen after Freeze: %+v", d, e)
		}
	}
	if err := Thaw(ctx, child, filepath.Dir(dir)); err == nil {
		t.Error("Thaw inside a frozen parent succeeded")
	}
	if err := Thaw(ctx, dir, filepath.Dir(dir)); err != nil {
		t.Fatal(err)
	}
	// A wait that cannot be satisfied ends with its context.
	short, cancelShort := context.WithTimeout(ctx, 20*time.Millisecond)
	if err := WaitEmpty(short, dir); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitEmpty on a populated group: %v", err)
	}
	cancelShort()
	if err := Kill(dir); err != nil {
		t.Fatal(err)
	}
	if err := WaitEmpty(ctx, dir); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*exec.Cmd{c1, c2} {
		if err := c.Wait(); err == nil || c.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Errorf("pid %d: %v, want killed", c.Process.Pid, err)
		}
	}
	if err := RemoveTree(dir); err != nil {
		t.Fatal(err)
	}
	if err := WaitEmpty(ctx, dir); err != nil {
		t.Errorf("WaitEmpty on a removed group: %v", err)
	}
}

func mustMount(t *testing.T) Mount {
	m, err := FindMount()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestThawTree: a leaf frozen on its own stays frozen through a Thaw of its
// parent, and a Thaw of it fails (writing nothing) under a frozen ancestor;
// ThawTree clears every freeze below it.
func TestThawTree(t *testing.T) {
	dir := testGroup(t)
	self := filepath.Join(dir, "self")
	child := filepath.Join(dir, "a2")
	childSelf := filepath.Join(child, "self")
	for _, d := range []string{self, child, childSelf} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// A stray directory inside a leaf: not a group for ProcsTree's caller,
	// but its processes are listed, and Walk can skip it.
	sub := filepath.Join(self, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	c1, c3 := startIn(t, self), startIn(t, sub)
	startIn(t, childSelf)
	if pids, err := ProcsTree(self); err != nil || len(pids) != 2 {
		t.Errorf("ProcsTree(self) = %v, %v; want %d and %d", pids, err, c1.Process.Pid, c3.Process.Pid)
	}
	if _, err := ProcsTree(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ProcsTree of a missing group: %v", err)
	}
	var walked []string
	Walk(dir, func(d string) error {
		walked = append(walked, d)
		if filepath.Base(d) == "self" {
			return fs.SkipDir
		}
		return nil
	})
	if strings.Contains(strings.Join(walked, " "), "sub") || len(walked) != 4 {
		t.Errorf("Walk with SkipDir visited %v", walked)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, d := range []string{childSelf, self, dir} {
		if err := Freeze(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	if got := FrozenAncestor(childSelf, filepath.Dir(dir)); got != dir {
		t.Errorf("FrozenAncestor = %q, want %q", got, dir)
	}
	var fe *FrozenError
	if err := Thaw(ctx, childSelf, filepath.Dir(dir)); !errors.As(err, &fe) || fe.Dir != dir || fe.Below {
		t.Errorf("Thaw under a frozen ancestor: %v", err)
	}
	if on, _ := FreezeSet(childSelf); !on {
		t.Error("a failed Thaw cleared the freeze")
	}
	if err := Thaw(ctx, dir, filepath.Dir(dir)); !errors.As(err, &fe) || !fe.Below {
		t.Errorf("Thaw of a group whose leaves are frozen themselves: %v", err)
	}
	if e, _ := ReadEvents(self); !e.Frozen {
		t.Errorf("%s thawed with its parent though frozen itself: %+v", self, e)
	}
	if err := ThawTree(ctx, dir, filepath.Dir(dir)); err != nil {
		t.Fatal(err)
	}
	err := Walk(dir, func(d string) error {
		on, err := FreezeSet(d)
		e, _ := ReadEvents(d)
		if err != nil || on || e.Frozen {
			return fmt.Errorf("%s after ThawTree: freeze %v (%v), %+v", d, on, err, e)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}

// TestReadFile: readFile reads a whole file of any size (past its first
// buffer, and empty), and a missing file is fs.ErrNotExist with its path,
// as os.ReadFile's errors were for the callers that test for it;
// writeFile writes, and fails on a missing file the same way.
func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	for _, size := range []int{0, 1, 511, 512, 513, 5000} {
		want := strings.Repeat("x", size)
		path := filepath.Join(dir, fmt.Sprint(size))
		if err := os.WriteFile(path, []byte(want), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := readFile(path)
		if err != nil || string(got) != want {
			t.Fatalf("%d bytes: read %d bytes, %v", size, len(got), err)
		}
	}
	missing := filepath.Join(dir, "missing")
	_, err := readFile(missing)
	var pe *fs.PathError
	if !errors.Is(err, fs.ErrNotExist) || !errors.As(err, &pe) || pe.Path != missing {
		t.Fatalf("a missing file: %v", err)
	}
	if _, err := readFile(dir); err == nil || !strings.Contains(err.Error(), dir) {
		t.Fatalf("a directory: %v, want an error naming it", err)
	}
	if err := writeFile(dir, "5000", "written"); err != nil {
		t.Fatal(err)
	}
	if got, err := readFile(filepath.Join(dir, "5000")); err != nil || string(got) != "written"+strings.Repeat("x", 5000-len("written")) {
		t.Fatalf("after writeFile: %.20q, %v", got, err)
	}
	err = writeFile(dir, "missing", "1")
	if !errors.Is(err, fs.ErrNotExist) || !errors.As(err, &pe) || pe.Path != missing {
		t.Fatalf("writeFile to a missing file: %v", err)
	}
}
