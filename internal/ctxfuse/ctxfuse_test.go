package ctxfuse_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kin-agents/kin/internal/ctxfs"
	"github.com/kin-agents/kin/internal/ctxfuse"
	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/kin"
)

// The test binary doubles as a helper run as another uid or killed with -9
// (KIN_CTXFUSE_HELPER).
func TestMain(m *testing.M) {
	switch os.Getenv("KIN_CTXFUSE_HELPER") {
	case "":
		code := m.Run()
		kintest.RemoveAgentBinary()
		os.Exit(code)
	case "connect":
		c, err := net.Dial("unix", os.Args[len(os.Args)-1])
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		c.Close()
		fmt.Println("connected")
		os.Exit(0)
	case "read":
		b, err := os.ReadFile(os.Args[len(os.Args)-1])
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		os.Stdout.Write(b)
		os.Exit(0)
	case "mount":
		src := newTableSource()
		m, err := ctxfuse.New(os.Args[len(os.Args)-1], src, nil)
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		_ = m
		fmt.Println("ready")
		select {} // until killed
	}
	os.Exit(2)
}

// tableSource is a Source over a table in memory: the registry stand-in
// these tests serve (the daemon's is in internal/runner).
type tableSource struct {
	mu     sync.Mutex
	byName map[string]kin.AgentID
	values map[kin.AgentID]ctxfs.ControlValues
}

func newTableSource() *tableSource {
	return &tableSource{byName: map[string]kin.AgentID{}, values: map[kin.AgentID]ctxfs.ControlValues{}}
}

func (s *tableSource) set(t *testing.T, a kin.Agent, rt ctxfs.Runtime) ctxfs.ControlValues {
	t.Helper()
	v, err := ctxfs.ControlFor(&a, rt)
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.byName[a.Name] = a.ID
	s.values[a.ID] = v
	return v
}

func (s *tableSource) Resolve(_ context.Context, name string) (kin.AgentID, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byName[name], nil
}

func (s *tableSource) Control(_ context.Context, id kin.AgentID) (ctxfs.ControlValues, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.values[id]
	if !ok {
		return v, fs.ErrNotExist
	}
	return v, nil
}

func (s *tableSource) Group(_ context.Context, id kin.AgentID) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.values[id]
	if !ok {
		return 0, fs.ErrNotExist
	}
	return v.GID, nil
}

func (s *tableSource) Names(context.Context) ([]ctxfuse.Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var es []ctxfuse.Entry
	for n, id := range s.byName {
		es = append(es, ctxfuse.Entry{Name: n, ID: id})
	}
	return es, nil
}

func agentValues(id kin.AgentID, name string, gid int) (kin.Agent, ctxfs.Runtime) {
	a := kin.Agent{ID: id, Name: name, Role: "worker", Status: kin.StatusActive, State: kin.StateActive, PID: 4242,
		Life: kin.LifeOwned, Responsible: "ops@example.com", CreatedAt: time.Date(2026, 3, 30, 12, 0, 0, 0, time.UTC)}
	a.UpdatedAt = a.CreatedAt
	rt := ctxfs.Runtime{UID: gid, GID: gid, Iso: "cgroup2", Cwd: "/work", Env: []string{"PATH=/bin", "HOME=/x"},
		Path: []string{"/bin"}, Policy: json.RawMessage(`{"allow": ["read"]}`), Log: "/var/log/x.log"}
	return a, rt
}

// mountAt serves src at a new directory and checks, when the test ends,
// that nothing is left mounted there.
func mountAt(t *testing.T, src ctxfuse.Source) (*ctxfuse.Mount, string) {
	t.Helper()
	if err := ctxfuse.Available(); err != nil {
		t.Skipf("FUSE: %v", err)
	}
	dir := filepath.Join(shortDir(t), "agent")
	if err := os.Mkdir(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	m, err := ctxfuse.New(dir, src, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { noMountLeft(t, m, dir) })
	return m, dir
}

// noMountLeft closes m and fails the test if a mount is left at dir
// (detaching it then, so that nothing outlives the test).
func noMountLeft(t *testing.T, m *ctxfuse.Mount, dir string) {
	t.Helper()
	if m != nil {
		if err := m.Close(); err != nil {
			t.Error(err)
		}
	}
	if n, err := ctxfuse.Mounted(dir); err != nil || n != 0 {
		t.Errorf("%d mounts left at %s (%v)", n, dir, err)
		ctxfuse.DetachStale(dir, nil)
	}
}

// shortDir is a temporary directory whose paths fit a socket's sun_path.
func shortDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("/tmp", "kcf")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(d, 0o755)
	t.Cleanup(func() {
		if n, _ := ctxfuse.Mounted(filepath.Join(d, "agent")); n == 0 {
			os.RemoveAll(d)
		}
	})
	return d
}

// TestServedFilesAsWritten: what the mount serves is what ctxfs writes on
// disk for the same values: names, contents, owners and modes.
func TestServedFilesAsWritten(t *testing.T) {
	src := newTableSource()
	a, rt := agentValues(7, "coder", 4001)
	v := src.set(t, a, rt)
	b, rtb := agentValues(9, "critic", 4002)
	src.set(t, b, rtb)
	_, dir := mountAt(t, src)

	disk, err := ctxfs.Open(filepath.Join(shortDir(t), "ctx"), ctxfs.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer disk.Close()
	if err := disk.WriteControl("coder", v); err != nil {
		t.Fatal(err)
	}
	want, got := describe(t, disk.AgentDir(), "coder"), describe(t, dir, "coder")
	if !slices.Equal(got, want) {
		t.Errorf("served:\n%s\non disk:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	st, err := os.Stat(dir)
	if err != nil || st.Mode() != fs.ModeDir|ctxfs.ModeKinDir {
		t.Errorf("agent/: %v %v", st.Mode(), err)
	}
	names, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var ls []string
	for _, e := range names {
		ls = append(ls, e.Name())
	}
	if want := []string{"coder", "coder.d", "critic", "critic.d"}; !slices.Equal(ls, want) {
		t.Errorf("ls agent/ = %v, want %v", ls, want)
	}
	if _, err := os.Stat(filepath.Join(dir, "nobody.d")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("an unknown agent: %v", err)
	}
}

// describe lists agent/<name> and agent/<name>.d/* as "path mode uid:gid
// content".
func describe(t *testing.T, agentDir, name string) []string {
	t.Helper()
	var out []string
	add := func(rel string) {
		p := filepath.Join(agentDir, rel)
		st, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		sys := st.Sys().(*syscall.Stat_t)
		line := fmt.Sprintf("%s %v %d:%d size=%d", rel, st.Mode(), sys.Uid, sys.Gid, st.Size())
		if !st.IsDir() {
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			line += fmt.Sprintf(" %q", b)
		}
		out = append(out, line)
	}
	add(name)
	add(name + ".d")
	es, err := os.ReadDir(filepath.Join(agentDir, name+".d"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		add(filepath.Join(name+".d", e.Name()))
	}
	sort.Strings(out)
	return out
}

// TestServedFilesLive: a change is seen by the next open, an open file
// keeps the content it was opened with, and a name taken by a later agent
// is that agent's at once.
func TestServedFilesLive(t *testing.T) {
	src := newTableSource()
	a, rt := agentValues(7, "coder", 4001)
	src.set(t, a, rt)
	_, dir := mountAt(t, src)
	status := filepath.Join(dir, "coder.d", ctxfs.CtlStatus)
	f, err := os.Open(status)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	a.Status = kin.StatusSuspended
	src.set(t, a, rt)
	if b, _ := os.ReadFile(status); string(b) != "suspended\n" {
		t.Errorf("after the change: %q", b)
	}
	if b, _ := bufio.NewReader(f).ReadString('\n'); b != "active\n" {
		t.Errorf("the file opened before the change: %q", b)
	}
	if st, err := os.Stat(status); err != nil || st.Size() != int64(len("suspended\n")) {
		t.Errorf("stat after the change: %v %v", st, err)
	}
	// A file larger than one read request (16 KiB) reads whole.
	rt.Policy = json.RawMessage(`{"note":"` + strings.Repeat("x", 40<<10) + `"}`)
	big := src.set(t, a, rt)
	if b, err := os.ReadFile(filepath.Join(dir, "coder.d", ctxfs.CtlPolicy)); err != nil || string(b) != string(big.Policy)+"\n" {
		t.Errorf("a 40 KiB policy: %d bytes, %v", len(b), err)
	}
	// The name taken again, by an agent of another group.
	b, rtb := agentValues(12, "coder", 4005)
	src.set(t, b, rtb)
	if got, _ := os.ReadFile(filepath.Join(dir, "coder")); string(got) != "12\n" {
		t.Errorf("agent/coder = %q", got)
	}
	st, err := os.Stat(filepath.Join(dir, "coder.d", ctxfs.CtlGID))
	if err != nil || st.Sys().(*syscall.Stat_t).Gid != 4005 {
		t.Errorf("the new agent's gid file: %v %v", st, err)
	}
}

// TestServedFilesReadOnly: nobody changes a served file, root included.
func TestServedFilesReadOnly(t *testing.T) {
	src := newTableSource()
	a, rt := agentValues(7, "coder", 4001)
	src.set(t, a, rt)
	_, dir := mountAt(t, src)
	for _, try := range []struct {
		what string
		do   func() error
	}{
		{"write a control file", func() error {
			return os.WriteFile(filepath.Join(dir, "coder.d", ctxfs.CtlStatus), []byte("revoked\n"), 0o640)
		}},
		{"create a file", func() error { return os.WriteFile(filepath.Join(dir, "coder.d", "x"), nil, 0o640) }},
		{"create in agent/", func() error { return os.WriteFile(filepath.Join(dir, "x"), nil, 0o640) }},
		{"remove a control file", func() error { return os.Remove(filepath.Join(dir, "coder.d", ctxfs.CtlPID)) }},
		{"remove the id file", func() error { return os.Remove(filepath.Join(dir, "coder")) }},
		{"chmod", func() error { return os.Chmod(filepath.Join(dir, "coder.d", ctxfs.CtlPID), 0o666) }},
		{"mkdir", func() error { return os.Mkdir(filepath.Join(dir, "new.d"), 0o750) }},
		{"a fifo", func() error { return unix.Mkfifo(filepath.Join(dir, "p"), 0o600) }},
	} {
		if err := try.do(); err == nil {
			t.Errorf("%s: allowed", try.what)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "coder.d", ctxfs.CtlStatus)); string(b) != "active\n" {
		t.Errorf("status = %q", b)
	}
}

// helper runs the test binary as u (nil: root) in a helper mode.
func helper(t *testing.T, u *kintest.User, mode, arg string) (string, error) {
	t.Helper()
	cmd := exec.Command(kintest.AgentBinary(t), "-test.run=^$", arg)
	cmd.Env = append(os.Environ(), "KIN_CTXFUSE_HELPER="+mode)
	if u != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: u.Credential()}
	}
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// TestOtherAgentRefused: as an ordinary user, an agent reads its own
// control files (its group) and is refused another agent's, and cannot
// list agent/.
func TestOtherAgentRefused(t *testing.T) {
	src := newTableSource()
	_, dir := mountAt(t, src)
	u := kintest.NewUser(t)
	a, rt := agentValues(7, "mine", u.GID)
	src.set(t, a, rt)
	b, rtb := agentValues(9, "theirs", u.GID+1)
	src.set(t, b, rtb)
	if out, err := helper(t, &u, "read", filepath.Join(dir, "mine.d", ctxfs.CtlLabel)); err != nil || out != "worker" {
		t.Errorf("its own label: %q %v", out, err)
	}
	if out, err := helper(t, &u, "read", filepath.Join(dir, "theirs.d", ctxfs.CtlLabel)); err == nil || !strings.Contains(out, "permission denied") {
		t.Errorf("another agent's label: %q %v", out, err)
	}
	if out, err := helper(t, &u, "read", filepath.Join(dir, "theirs")); err != nil || out != "9" {
		t.Errorf("another agent's id file (0644): %q %v", out, err)
	}
	if _, err := helper(t, &u, "read", dir); err == nil {
		t.Errorf("listing agent/ (0711) as an agent was allowed")
	}
}

// TestSocketInMount: a socket the daemon binds in the mount, given to an
// agent's uid, is reached by path from that uid, also after the kernel was
// told to drop its dentry and inode caches; a closed one is gone.
func TestSocketInMount(t *testing.T) {
	src := newTableSource()
	_, dir := mountAt(t, src)
	u := kintest.NewUser(t)
	path := filepath.Join(dir, "coder.sock")
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(path, u.UID, u.GID); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(fd, 8); err != nil {
		t.Fatal(err)
	}
	st, err := os.Lstat(path)
	if err != nil || st.Mode() != fs.ModeSocket|0o600 || st.Sys().(*syscall.Stat_t).Uid != uint32(u.UID) {
		t.Fatalf("the socket: %v %v", st, err)
	}
	for i := range 2 {
		if out, err := helper(t, &u, "connect", path); err != nil || out != "connected" {
			t.Fatalf("connect %d as the agent's uid: %q %v", i, out, err)
		}
		if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("2"), 0); err != nil {
			t.Logf("drop caches: %v", err)
		}
	}
	other := kintest.NewUser(t)
	if out, err := helper(t, &other, "connect", path); err == nil {
		t.Errorf("another uid connected: %q", out)
	}
	if err := unix.Unlink(path); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("after unlink: %v", err)
	}
}

// TestSocketRemovedWithoutRequest: RemoveSocket drops a bound socket's
// node and tells the kernel (no unlink request): the path is gone at once
// for every process, whether the kernel held its entry or had dropped it,
// its name can be bound again, and the kernel's node is let go of as after
// an unlink. A path not bound here, or outside the mount, is left to the
// caller (false).
func TestSocketRemovedWithoutRequest(t *testing.T) {
	m, dir := mountAt(t, newTableSource())
	// bind binds and listens at name; close closes the socket, once.
	bind := func(name string) (path string, close func()) {
		t.Helper()
		path = filepath.Join(dir, name)
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		close = sync.OnceFunc(func() { unix.Close(fd) })
		t.Cleanup(close)
		if err := unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err != nil {
			t.Fatal(err)
		}
		if err := unix.Listen(fd, 8); err != nil {
			t.Fatal(err)
		}
		return path, close
	}
	gone := func(path, when string) {
		t.Helper()
		if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s %s: lstat %v", path, when, err)
		}
		// Another process looks it up by path too.
		if out, err := exec.Command("stat", "-c", "%F", path).CombinedOutput(); err == nil {
			t.Errorf("%s %s: stat(1) found it: %s", path, when, out)
		}
	}
	for _, dropped := range []bool{false, true} {
		path, closeSock := bind("coder.sock")
		if st, err := os.Lstat(path); err != nil || st.Mode().Type() != fs.ModeSocket {
			t.Fatalf("the socket: %v %v", st, err)
		}
		if dropped { // the kernel holds no entry of it any more
			if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("2"), 0); err != nil {
				t.Skipf("drop caches: %v", err)
			}
		}
		closeSock()
		if !m.RemoveSocket(path) {
			t.Fatalf("RemoveSocket(%s) = false for a bound socket", path)
		}
		gone(path, fmt.Sprintf("after RemoveSocket (caches dropped: %v)", dropped))
		if m.RemoveSocket(path) {
			t.Errorf("RemoveSocket(%s) again = true", path)
		}
		if ents, err := os.ReadDir(dir); err != nil || len(ents) != 0 {
			t.Errorf("agent/ after RemoveSocket: %v %v", ents, err)
		}
	}
	// Bound again under the same name: a new node, reached by path.
	path, closeSock := bind("coder.sock")
	if st, err := os.Lstat(path); err != nil || st.Mode().Type() != fs.ModeSocket {
		t.Fatalf("the socket bound again: %v %v", st, err)
	}
	closeSock()
	if m.RemoveSocket(filepath.Join(dir, "other.sock")) || m.RemoveSocket(filepath.Join(filepath.Dir(dir), "coder.sock")) {
		t.Error("RemoveSocket took a path not bound in the mount")
	}
	if err := unix.Unlink(path); err != nil {
		t.Fatal(err)
	}
	gone(path, "after unlink")
	// The kernel lets go of the removed nodes as of unlinked ones.
	deadline := time.Now().Add(10 * time.Second)
	for {
		os.WriteFile("/proc/sys/vm/drop_caches", []byte("2"), 0)
		if _, s := ctxfuse.Held(m); s == 0 {
			break
		}
		if time.Now().After(deadline) {
			_, s := ctxfuse.Held(m)
			t.Fatalf("%d sockets still held after the kernel let go", s)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestDeadMountReplaced: a daemon killed with -9 leaves a mount answering
// ENOTCONN; the next daemon detaches it (DetachStale, at the runner's
// Open) and New serves again.
func TestDeadMountReplaced(t *testing.T) {
	dir, cmd := mountInHelper(t)
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	if _, err := os.Stat(filepath.Join(dir, "x")); !errors.Is(err, syscall.ENOTCONN) {
		t.Fatalf("the dead mount: %v, want ENOTCONN", err)
	}
	src := newTableSource()
	a, rt := agentValues(7, "coder", 4001)
	src.set(t, a, rt)
	if n, err := ctxfuse.DetachStale(dir, nil); n != 1 || err != nil {
		t.Fatalf("DetachStale of the dead mount: %d, %v; want 1", n, err)
	}
	m, err := ctxfuse.New(dir, src, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if n, _ := ctxfuse.Mounted(dir); n != 1 {
		t.Errorf("%d mounts at %s, want 1", n, dir)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "coder")); err != nil || string(b) != "7\n" {
		t.Errorf("served again: %q %v", b, err)
	}
}

// TestStuckMountReplaced: a mount whose server is alive but answers
// nothing (stopped here; a killed daemon whose connection another process
// held did the same) leaves a reader blocked in it. The next daemon's
// DetachStale ends that connection before detaching it, so the reader gets
// an error at once instead of hanging for as long as the connection lives.
func TestStuckMountReplaced(t *testing.T) {
	dir, server := mountInHelper(t)
	if err := server.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	reader := exec.Command(os.Args[0], "-test.run=^$", filepath.Join(dir, "anyone"))
	reader.Env = append(os.Environ(), "KIN_CTXFUSE_HELPER=read")
	var got strings.Builder
	reader.Stdout = &got
	if err := reader.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- reader.Wait() }()
	defer reader.Process.Kill()
	// The reader is blocked on the stopped server.
	kintest.WaitFor(t, 10*time.Second, "the reader blocked in the mount", func() bool {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/wchan", reader.Process.Pid))
		return strings.Contains(string(b), "fuse") || strings.Contains(string(b), "request_wait")
	})
	if n, err := ctxfuse.DetachStale(dir, nil); n != 1 || err != nil {
		t.Fatalf("DetachStale of the stuck mount: %d, %v; want 1", n, err)
	}
	m, err := ctxfuse.New(dir, newTableSource(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	select {
	case <-exited:
		if !strings.Contains(got.String(), "not connected") && !strings.Contains(got.String(), "connection abort") {
			t.Errorf("the blocked reader: %q; want the connection's end", got.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the reader is still blocked in the stuck mount after DetachStale")
	}
}

// TestConnectionClosedOnExec: the mount's /dev/fuse descriptor is not
// inherited by what the daemon starts (go-fuse leaves it without
// close-on-exec): an agent's shim holding it kept a killed daemon's
// connection alive and blocked on it.
func TestConnectionClosedOnExec(t *testing.T) {
	mountAt(t, newTableSource())
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if l, _ := os.Readlink("/proc/self/fd/" + e.Name()); l != "/dev/fuse" {
			continue
		}
		n++
		fd, _ := strconv.Atoi(e.Name())
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil || flags&unix.FD_CLOEXEC == 0 {
			t.Errorf("/dev/fuse on descriptor %d: flags %#x, %v; want close-on-exec", fd, flags, err)
		}
	}
	if n == 0 {
		t.Fatal("no /dev/fuse descriptor found while mounted")
	}
}

// stallSource answers control values only once release is closed (a store
// that does not answer), or ends the request when its context does.
type stallSource struct {
	*tableSource
	release chan struct{}
}

func (s stallSource) Control(ctx context.Context, id kin.AgentID) (ctxfs.ControlValues, error) {
	select {
	case <-s.release:
	case <-ctx.Done():
		return ctxfs.ControlValues{}, ctx.Err()
	}
	return s.tableSource.Control(ctx, id)
}

// TestKilledReaderNotHeldByTheStore: a reader waiting on a control file
// whose answer waits on the store is killable: the kernel waits for the
// answer to a request the server has read, and the signal's INTERRUPT ends
// the source's context, so the answer comes at once (a host cut off from
// its store fences its agents within fence-after and grace).
func TestKilledReaderNotHeldByTheStore(t *testing.T) {
	src := stallSource{tableSource: newTableSource(), release: make(chan struct{})}
	a, rt := agentValues(7, "coder", 4001)
	src.set(t, a, rt)
	_, dir := mountAt(t, src)
	defer close(src.release)
	reader := exec.Command(os.Args[0], "-test.run=^$", filepath.Join(dir, "coder.d", ctxfs.CtlStatus))
	reader.Env = append(os.Environ(), "KIN_CTXFUSE_HELPER=read")
	if err := reader.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { reader.Wait(); close(exited) }()
	defer reader.Process.Kill()
	kintest.WaitFor(t, 10*time.Second, "the reader waiting on the stalled store", func() bool {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/wchan", reader.Process.Pid))
		return strings.Contains(string(b), "request_wait")
	})
	reader.Process.Signal(syscall.SIGKILL)
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		t.Fatal("the killed reader is still held by a request the stalled store has not answered")
	}
}

// mountInHelper mounts a served agent/ in a fresh directory from a helper
// process (the test binary, KIN_CTXFUSE_HELPER=mount), which the test may
// stop or kill; the helper is killed and the mount checked gone at the
// test's end.
func mountInHelper(t *testing.T) (string, *exec.Cmd) {
	t.Helper()
	if err := ctxfuse.Available(); err != nil {
		t.Skipf("FUSE: %v", err)
	}
	dir := filepath.Join(shortDir(t), "agent")
	if err := os.Mkdir(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { noMountLeft(t, nil, dir) })
	cmd := exec.Command(os.Args[0], "-test.run=^$", dir)
	cmd.Env = append(os.Environ(), "KIN_CTXFUSE_HELPER=mount")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "ready\n" {
		t.Fatalf("the mounting helper: %q", line)
	}
	return dir, cmd
}

// ownerSource is a tableSource that also names the owner of the sockets
// bound in the mount (ctxfuse.SocketOwners).
type ownerSource struct {
	*tableSource
	owners map[string][2]uint32
}

func (s *ownerSource) SocketOwner(name string) (uid, gid uint32, ok bool) {
	o, ok := s.owners[name]
	return o[0], o[1], ok
}

// TestSocketOwnedAtBind: where the source names a socket's owner, the node
// bind(2) makes in the mount has that owner at once, and the mode the
// socket had before bind (0600), so that the daemon needs no chown or
// chmod through the mount; the agent's uid connects, another does not. A
// socket the source names no owner for stays the binder's.
func TestSocketOwnedAtBind(t *testing.T) {
	u := kintest.NewUser(t)
	src := &ownerSource{tableSource: newTableSource(), owners: map[string][2]uint32{"coder.sock": {uint32(u.UID), uint32(u.GID)}}}
	_, dir := mountAt(t, src)
	bind := func(name string) (string, int) {
		path := filepath.Join(dir, name)
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Close(fd); unix.Unlink(path) })
		if err := unix.Fchmod(fd, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err != nil {
			t.Fatal(err)
		}
		if err := unix.Listen(fd, 8); err != nil {
			t.Fatal(err)
		}
		return path, fd
	}
	path, _ := bind("coder.sock")
	st, err := os.Lstat(path)
	if err != nil || st.Mode() != fs.ModeSocket|0o600 || st.Sys().(*syscall.Stat_t).Uid != uint32(u.UID) || st.Sys().(*syscall.Stat_t).Gid != uint32(u.GID) {
		t.Fatalf("the socket: %v %+v %v, want mode 0600 owned by %d:%d", st, st.Sys(), err, u.UID, u.GID)
	}
	if out, err := helper(t, &u, "connect", path); err != nil || out != "connected" {
		t.Fatalf("connect as the agent's uid: %q %v", out, err)
	}
	other := kintest.NewUser(t)
	if out, err := helper(t, &other, "connect", path); err == nil {
		t.Errorf("another uid connected: %q", out)
	}
	path, _ = bind("other.sock")
	if st, err := os.Lstat(path); err != nil || st.Sys().(*syscall.Stat_t).Uid != uint32(os.Geteuid()) {
		t.Fatalf("a socket the source names no owner for: %+v %v, want the binder's uid %d", st.Sys(), err, os.Geteuid())
	}
}

// TestHeldNodesCostLittle: what the kernel holds of a live agent (its
// <name>.d, which its shim's Landlock rule keeps looked up, and its bound
// socket) costs the daemon a few hundred bytes, not a node tree (issue
// 22's memory: go-fuse's nodes held ~1.2 KiB an agent); and all of it is
// let go once the kernel forgets the nodes.
func TestHeldNodesCostLittle(t *testing.T) {
	const agents = 1000
	src := newTableSource()
	for i := range agents {
		a, rt := agentValues(kin.AgentID(100+i), fmt.Sprintf("a%d", i), 4000+i%7)
		src.set(t, a, rt)
	}
	m, dir := mountAt(t, src)
	var fds []int
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	heap := func() uint64 {
		runtime.GC() // twice: the first leaves sync.Pools' contents (the
		runtime.GC() // server's request buffers) in their victim caches
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	hold := func(from, to int) {
		for i := from; i < to; i++ {
			fd, err := unix.Open(filepath.Join(dir, fmt.Sprintf("a%d.d", i)), unix.O_PATH|unix.O_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			fds = append(fds, fd)
			s, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			fds = append(fds, s)
			if err := unix.Bind(s, &unix.SockaddrUnix{Name: filepath.Join(dir, fmt.Sprintf("a%d.sock", i))}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The cost of the second half over the first: what the server keeps
	// whatever the number of agents (its request buffers, as many as
	// requests came at once) is there by then.
	fds = make([]int, 0, 2*agents)
	hold(0, agents/2)
	before := heap()
	hold(agents/2, agents)
	after := heap()
	perAgent := (int64(after) - int64(before)) / (agents - agents/2)
	t.Logf("%d agents' directories and sockets held: %d bytes of heap an agent", agents, perAgent)
	if perAgent > 768 {
		t.Errorf("%d bytes of heap an agent for its held nodes, want at most 768", perAgent)
	}
	if d, s := ctxfuse.Held(m); d != agents || s != agents {
		t.Errorf("held: %d directories, %d sockets; want %d each", d, s, agents)
	}

	for i := range agents {
		if err := unix.Unlink(filepath.Join(dir, fmt.Sprintf("a%d.sock", i))); err != nil {
			t.Fatal(err)
		}
	}
	for _, fd := range fds {
		unix.Close(fd)
	}
	fds = nil
	// The kernel forgets the nodes nothing uses when told to drop its
	// dentry and inode caches (its FORGETs come after, each in a request
	// of its own): told again every half second, for up to 10 s.
	deadline := time.Now().Add(10 * time.Second)
	var dropped time.Time
	for {
		if time.Since(dropped) > 500*time.Millisecond {
			if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("2"), 0); err != nil {
				t.Skipf("drop caches: %v", err)
			}
			dropped = time.Now()
		}
		d, s := ctxfuse.Held(m)
		if d == 0 && s == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still held after the kernel let go: %d directories, %d sockets", d, s)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
