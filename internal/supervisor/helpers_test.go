package supervisor

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kin-agents/kin/internal/proctest"
	"github.com/kin-agents/kin/internal/sandbox"
	"github.com/kin-agents/kin/internal/supervisor/cgroup"
	"github.com/kin-agents/kin/kin"
)

// Every cgroup a test makes is named with testPrefix, so that TestMain can
// find (and kill and remove) whatever a failed test left behind.
var (
	testPrefix = fmt.Sprintf("kin-test-%d-", os.Getpid())
	nameSeq    atomic.Int64
)

// helperEnv makes the test binary a helper process instead of running
// tests: "setpgid-sleep" moves itself into a new process group and execs
// sleep 1000.
const helperEnv = "KIN_SUPERVISOR_TEST_HELPER"

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == sandbox.Subcommand {
		os.Exit(sandbox.Main(os.Args[2:], os.Stderr)) // kin's init, as the daemon runs it
	}
	if os.Getenv(helperEnv) == "setpgid-sleep" {
		if err := syscall.Setpgid(0, 0); err != nil {
			fmt.Fprintln(os.Stderr, "setpgid:", err)
			os.Exit(2)
		}
		err := syscall.Exec("/bin/sleep", []string{"sleep", "1000"}, os.Environ())
		fmt.Fprintln(os.Stderr, "exec sleep:", err)
		os.Exit(2)
	}
	code := m.Run()
	if left := removeLeftovers(); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: tests left cgroups behind (now removed): %s\n", strings.Join(left, ", "))
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// removeLeftovers kills and removes this run's test cgroups.
func removeLeftovers() []string {
	m, err := cgroup.FindMount()
	if err != nil {
		return nil
	}
	parents := []string{m.Dir}
	if own, err := m.DirOfPID(0); err == nil && own != m.Dir {
		parents = append(parents, own)
	}
	var left []string
	for _, parent := range parents {
		ents, _ := os.ReadDir(parent)
		for _, e := range ents {
			if !e.IsDir() || !strings.HasPrefix(e.Name(), testPrefix) {
				continue
			}
			dir := filepath.Join(parent, e.Name())
			left = append(left, dir)
			cgroup.Kill(dir)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			cgroup.WaitEmpty(ctx, dir)
			cancel()
			cgroup.RemoveTree(dir)
		}
	}
	return left
}

func uniqueName() string { return testPrefix + strconv.FormatInt(nameSeq.Add(1), 10) }

// newSup starts a supervisor named for this test run and closes it when the
// test ends, checking that its root cgroup is gone.
func newSup(t testing.TB, cfg Config) *Supervisor {
	t.Helper()
	if cfg.Name == "" {
		cfg.Name = uniqueName()
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if root := s.Root(); root != "" && !cfg.KeepOnClose {
			if _, err := os.Stat(root); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("root cgroup %s still exists after Close (stat: %v)", root, err)
			}
		}
	})
	return s
}

// newCgroupSup is newSup that requires cgroup2 containment, skipping (with
// the reason) only where no writable cgroup2 exists.
func newCgroupSup(t testing.TB, cfg Config) *Supervisor {
	t.Helper()
	s := newSup(t, cfg)
	if s.Containment() != ContainmentCgroup2 {
		t.Skipf("no writable cgroup v2 here (%s): cgroup tests need one", s.ContainmentReason())
	}
	return s
}

// both runs f under each containment.
func both(t *testing.T, f func(t *testing.T, s *Supervisor)) {
	t.Run(ContainmentCgroup2, func(t *testing.T) { f(t, newCgroupSup(t, Config{})) })
	t.Run(ContainmentProcessGroups, func(t *testing.T) {
		f(t, newSup(t, Config{Containment: ContainmentProcessGroups}))
	})
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// waitFor polls cond until it holds, failing the test after d.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		<-tick.C
	}
}

func start(t testing.TB, s *Supervisor, spec Spec) *Process {
	t.Helper()
	if spec.Env == nil {
		spec.Env = []string{"PATH=/usr/bin:/bin"}
	}
	p, err := s.Start(testCtx(t), spec)
	if err != nil {
		t.Fatalf("Start %d: %v", spec.ID, err)
	}
	return p
}

func sleeper(id, parent kin.AgentID) Spec {
	return Spec{ID: id, ParentID: parent, Argv: []string{"sleep", "1000"}}
}

func waitExit(t testing.TB, p *Process) Exit {
	t.Helper()
	e, err := p.Wait(testCtx(t))
	if err != nil {
		t.Fatalf("agent %d pid %d: %v", p.ID, p.Pid, err)
	}
	return e
}

// pidWatch holds a pidfd on a process to tell, without pid-reuse races,
// when it has been reaped (proctest.Pidfd).
type pidWatch struct{ proctest.Pidfd }

func watchPid(t testing.TB, pid int) pidWatch {
	t.Helper()
	p, err := proctest.OpenPidfd(pid)
	if err != nil {
		t.Fatalf("pidfd_open %d: %v", pid, err)
	}
	t.Cleanup(p.Close)
	return pidWatch{p}
}

func (w pidWatch) reaped() bool {
	reaped, _ := w.Reaped()
	return reaped
}

// readLabels reads "label pid" lines that test scripts append to a file.
func readLabels(path string) map[string]int {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	out := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		label, pid, ok := strings.Cut(sc.Text(), " ")
		if n, err := strconv.Atoi(pid); ok && err == nil {
			out[label] = n
		}
	}
	return out
}

func writeScript(t testing.TB, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func threadCount(t testing.TB) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no Threads: line in /proc/self/status")
	return 0
}

// sigIgnored reports whether pid ignores sig (proctest.SignalIgnored).
func sigIgnored(t testing.TB, pid int, sig unix.Signal) bool {
	t.Helper()
	ignored, err := proctest.SignalIgnored(pid, sig)
	if err != nil {
		t.Fatal(err)
	}
	return ignored
}
