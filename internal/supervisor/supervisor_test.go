package supervisor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kin-agents/kin/internal/supervisor/cgroup"
	"github.com/kin-agents/kin/kin"
)

func TestContainment(t *testing.T) {
	s := newCgroupSup(t, Config{})
	root := s.Root()
	if !strings.Contains(filepath.Base(root), "kin") {
		t.Errorf("root %s is not named with kin", root)
	}
	m, err := cgroup.FindMount()
	if err != nil {
		t.Fatal(err)
	}
	if !within(root, m.Dir) {
		t.Errorf("root %s is outside the cgroup2 mount %s", root, m.Dir)
	}
	if miss := cgroup.Missing(root); len(miss) > 0 {
		t.Errorf("root lacks %v", miss)
	}
	t.Logf("containment %s, root %s, mount %s", s.Containment(), root, m.Dir)

	f := newSup(t, Config{Containment: ContainmentProcessGroups})
	if f.Containment() != ContainmentProcessGroups || f.Root() != "" || f.ContainmentReason() == "" {
		t.Errorf("forced fallback: containment %q root %q reason %q", f.Containment(), f.Root(), f.ContainmentReason())
	}
	if _, err := New(Config{Name: "../kin-escape"}); err == nil {
		t.Error("New accepted a name with a slash")
	}
}

// TestStopTree runs a 3-level tree: the top agent has a child that moved
// to its own process group; the middle one double-forks a process into a new
// session (it re-parents to the daemon, the subreaper); the leaf ignores
// SIGTERM, and so does its child. Stopping the top must kill and reap all of
// them.
func TestStopTree(t *testing.T) {
	for _, grace := range []time.Duration{0, 300 * time.Millisecond} {
		t.Run("grace="+grace.String(), func(t *testing.T) {
			both(t, func(t *testing.T, s *Supervisor) { testStopTree(t, s, grace) })
		})
	}
}

func testStopTree(t *testing.T, s *Supervisor, grace time.Duration) {
	ctx := testCtx(t)
	dir := t.TempDir()
	pids := filepath.Join(dir, "pids")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=/usr/bin:/bin", "PIDS=" + pids, "TESTBIN=" + self}
	top := writeScript(t, dir, "top.sh", `echo "top $$" >> "$PIDS"
`+helperEnv+`=setpgid-sleep "$TESTBIN" &
echo "top-child $!" >> "$PIDS"
exec sleep 1000
`)
	mid := writeScript(t, dir, "mid.sh", `echo "mid $$" >> "$PIDS"
( setsid sh -c 'echo "orphan $$" >> "$PIDS"; exec sleep 1000' & )
exec sleep 1000
`)
	leaf := writeScript(t, dir, "leaf.sh", `trap '' TERM
echo "leaf $$" >> "$PIDS"
sleep 1000 &
echo "leaf-child $!" >> "$PIDS"
exec sleep 1000
`)
	p1 := start(t, s, Spec{ID: 1, Argv: []string{"/bin/sh", top}, Env: env})
	p2 := start(t, s, Spec{ID: 2, ParentID: 1, Argv: []string{"/bin/sh", mid}, Env: env})
	p3 := start(t, s, Spec{ID: 3, ParentID: 2, Argv: []string{"/bin/sh", leaf}, Env: env})

	all := []string{"top", "top-child", "mid", "orphan", "leaf", "leaf-child"}
	var labels map[string]int
	waitFor(t, 10*time.Second, "all six processes to report", func() bool {
		labels = readLabels(pids)
		return len(labels) == len(all)
	})
	watches := map[string]pidWatch{}
	for _, l := range all {
		watches[l] = watchPid(t, labels[l])
	}
	orphan := labels["orphan"]
	waitFor(t, 10*time.Second, "the double-forked process to re-parent to the subreaper", func() bool {
		st, err := readStat(orphan)
		return err == nil && st.ppid == os.Getpid()
	})
	if st, _ := readStat(orphan); st.sid != orphan {
		t.Fatalf("orphan %d is in session %d, not its own", orphan, st.sid)
	}
	// It reported its pid before its exec of sleep: its environment (the
	// process-groups fallback's marker) can read empty while the exec replaces
	// its memory, after its name is sleep's already (the kernel sets the new
	// name before it lays out the new environment: CI once read it empty).
	waitFor(t, 10*time.Second, "the double-forked process to run sleep, its environment in place", func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", orphan))
		if err != nil || strings.TrimSpace(string(b)) != "sleep" {
			return false
		}
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", orphan))
		return err == nil && len(env) > 0
	})
	waitFor(t, 10*time.Second, "top's child to lead its own process group", func() bool {
		st, err := readStat(labels["top-child"])
		return err == nil && st.pgid == labels["top-child"]
	})
	for _, l := range []string{"leaf", "leaf-child"} {
		if !sigIgnored(t, labels[l], unix.SIGTERM) {
			t.Fatalf("%s (pid %d) does not ignore SIGTERM", l, labels[l])
		}
	}
	if s.cg {
		// Groups nest (a1/a2/a3); each agent's processes are in its self
		// leaf (a1/self, a1/a2/self, ...), never in a group directory.
		if p2.Cgroup != filepath.Join(p1.Cgroup, "a2") || p3.Cgroup != filepath.Join(p2.Cgroup, "a3") {
			t.Fatalf("groups are not nested: %s %s %s", p1.Cgroup, p2.Cgroup, p3.Cgroup)
		}
		for _, p := range []*Process{p1, p2, p3} {
			if p.SelfCgroup() != filepath.Join(p.Cgroup, SelfLeaf) {
				t.Fatalf("agent %d: leaf %s, group %s", p.ID, p.SelfCgroup(), p.Cgroup)
			}
			if procs, err := cgroup.Procs(p.SelfCgroup()); err != nil || len(procs) == 0 {
				t.Fatalf("leaf %s holds no process (%v)", p.SelfCgroup(), err)
			}
			if procs, err := cgroup.Procs(p.Cgroup); err != nil || len(procs) != 0 {
				t.Fatalf("group %s holds processes %v (%v); they belong in its leaf", p.Cgroup, procs, err)
			}
			if d, err := s.mount.DirOfPID(p.Pid); err != nil || d != p.SelfCgroup() {
				t.Fatalf("agent %d's process is in %s (%v), want %s", p.ID, d, err, p.SelfCgroup())
			}
		}
		if d, _ := s.mount.DirOfPID(orphan); d != p2.SelfCgroup() {
			t.Fatalf("orphan is in %s, not in its agent's leaf %s", d, p2.SelfCgroup())
		}
	}
	for l, want := range map[string]kin.AgentID{"top": 1, "top-child": 1, "mid": 2, "orphan": 2, "leaf": 3, "leaf-child": 3} {
		if got, ok := s.AgentOfPID(labels[l]); !ok || got != want {
			t.Errorf("AgentOfPID(%s) = %d, %v; want %d", l, got, ok, want)
		}
	}

	began := time.Now()
	if err := s.Stop(ctx, 1, grace); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	took := time.Since(began)
	if grace > 0 && took < grace {
		t.Errorf("Stop took %v, less than the grace %v, though two processes ignore SIGTERM", took, grace)
	}
	t.Logf("Stop(grace %v) took %v", grace, took)

	wantSig := map[*Process]syscall.Signal{p1: syscall.SIGKILL, p2: syscall.SIGKILL, p3: syscall.SIGKILL}
	if grace > 0 {
		wantSig[p1], wantSig[p2] = syscall.SIGTERM, syscall.SIGTERM
	}
	for p, sig := range wantSig {
		e, ok := p.Exit()
		if !ok {
			t.Fatalf("agent %d: Stop returned before its process was reaped", p.ID)
		}
		if e.Signal != sig || e.Code != -1 {
			t.Errorf("agent %d: %v, want signal %v", p.ID, e, sig)
		}
	}
	for _, l := range all {
		w := watches[l]
		waitFor(t, 5*time.Second, l+" to be dead and reaped", w.reaped)
	}
	if s.cg {
		if _, err := os.Stat(p1.Cgroup); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("group %s still exists after Stop", p1.Cgroup)
		}
	}
	for _, id := range []kin.AgentID{1, 2, 3} {
		if _, err := s.Group(id); !errors.Is(err, ErrUnknownAgent) {
			t.Errorf("Group(%d) after Stop: %v, want ErrUnknownAgent", id, err)
		}
	}
}

func TestExitStatus(t *testing.T) {
	both(t, func(t *testing.T, s *Supervisor) {
		ctx := testCtx(t)
		var mu sync.Mutex
		reported := map[kin.AgentID]Exit{}
		s.cfg.OnExit = func(e Exit) {
			mu.Lock()
			reported[e.ID] = e
			mu.Unlock()
		}
		p3 := start(t, s, Spec{ID: 1, Argv: []string{"/bin/sh", "-c", "exit 3"}})
		if e := waitExit(t, p3); e.Code != 3 || e.Signal != 0 || e.Success() || e.Err != nil {
			t.Errorf("exit 3: got %v", e)
		}
		p0 := start(t, s, Spec{ID: 2, Argv: []string{"true"}})
		if e := waitExit(t, p0); !e.Success() || e.Ended.Before(e.Started) {
			t.Errorf("true: got %v (%v..%v)", e, e.Started, e.Ended)
		}
		self := start(t, s, Spec{ID: 3, Argv: []string{"/bin/sh", "-c", "kill -KILL $$"}})
		if e := waitExit(t, self); e.Signal != syscall.SIGKILL || e.Code != -1 {
			t.Errorf("kill -KILL $$: got %v", e)
		}
		term := start(t, s, sleeper(4, 0))
		if err := term.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if e := waitExit(t, term); e.Signal != syscall.SIGTERM {
			t.Errorf("SIGTERM: got %v", e)
		}
		if err := term.Signal(syscall.SIGTERM); !errors.Is(err, ErrProcessDone) {
			t.Errorf("Signal after exit: %v, want ErrProcessDone", err)
		}
		killed := start(t, s, sleeper(5, 0))
		if err := s.Kill(ctx, 5); err != nil {
			t.Fatal(err)
		}
		if e, ok := killed.Exit(); !ok || e.Signal != syscall.SIGKILL {
			t.Errorf("Kill: got %v, %v", e, ok)
		}
		// An agent may run again in its group once its process exited.
		again := start(t, s, Spec{ID: 1, Argv: []string{"/bin/sh", "-c", "exit 4"}})
		if e := waitExit(t, again); e.Code != 4 {
			t.Errorf("second run: got %v", e)
		}
		if _, err := s.Start(ctx, sleeper(6, 0)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Start(ctx, sleeper(6, 0)); !errors.Is(err, ErrRunning) {
			t.Errorf("second Start of a running agent: %v, want ErrRunning", err)
		}
		if _, err := s.Start(ctx, Spec{ID: 7, Argv: []string{"/nonexistent/kin-agent"}}); err == nil {
			t.Error("Start of a missing binary succeeded")
		}
		mu.Lock()
		defer mu.Unlock()
		if e := reported[3]; e.Signal != syscall.SIGKILL {
			t.Errorf("OnExit for agent 3: %v", e)
		}
	})
}

func TestFreezeThaw(t *testing.T) {
	s := newCgroupSup(t, Config{})
	ctx := testCtx(t)
	p1 := start(t, s, sleeper(1, 0))
	p2 := start(t, s, sleeper(2, 1))
	events := func(dir string) cgroup.Events {
		e, err := cgroup.ReadEvents(dir)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	if err := s.Freeze(ctx, 1, true); err != nil {
		t.Fatalf("Freeze: %v", err)
	}
	for _, dir := range []string{p1.Cgroup, p1.SelfCgroup(), p2.Cgroup, p2.SelfCgroup()} {
		if e := events(dir); !e.Frozen || !e.Populated {
			t.Errorf("after Freeze, %s: %+v", dir, e)
		}
	}
	if self, eff, err := s.Frozen(1); err != nil || !self || !eff {
		t.Errorf("Frozen(1) = %v, %v, %v; want true, true", self, eff, err)
	}
	if self, eff, err := s.Frozen(2); err != nil || self || !eff {
		t.Errorf("Frozen(2) = %v, %v, %v; want false (not its own freeze), true", self, eff, err)
	}
	if g, err := s.Group(1); err != nil || !g.Frozen || !g.SelfFrozen || !g.SubtreeFrozen || len(g.Pids) != 1 || g.Pids[0] != p1.Pid {
		t.Errorf("Group(1) = %+v, %v", g, err)
	}
	for _, sub := range []bool{false, true} {
		if err := s.Thaw(ctx, 2, sub); !errors.Is(err, ErrInFrozenSubtree) {
			t.Errorf("Thaw(child, subtree %v) inside a frozen parent: %v, want ErrInFrozenSubtree", sub, err)
		}
	}
	if err := s.Thaw(ctx, 1, false); !errors.Is(err, ErrInFrozenSubtree) {
		t.Errorf("Thaw(1, false) of a subtree freeze: %v, want ErrInFrozenSubtree", err)
	}
	if err := s.Thaw(ctx, 1, true); err != nil {
		t.Fatalf("Thaw: %v", err)
	}
	for _, dir := range []string{p1.Cgroup, p1.SelfCgroup(), p2.Cgroup, p2.SelfCgroup()} {
		if e := events(dir); e.Frozen {
			t.Errorf("after Thaw, %s: %+v", dir, e)
		}
	}
	if self, eff, err := s.Frozen(1); err != nil || self || eff {
		t.Errorf("Frozen(1) after Thaw = %v, %v, %v", self, eff, err)
	}
	// A frozen tree stopped with a grace is thawed so SIGTERM can work.
	if err := s.Freeze(ctx, 1, true); err != nil {
		t.Fatal(err)
	}
	if err := s.Freeze(ctx, 2, false); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(ctx, 1, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*Process{p1, p2} {
		if e, _ := p.Exit(); e.Signal != syscall.SIGTERM {
			t.Errorf("agent %d stopped while frozen: %v, want SIGTERM", p.ID, e)
		}
	}
}

func TestFreezeThawProcessGroups(t *testing.T) {
	s := newSup(t, Config{Containment: ContainmentProcessGroups})
	ctx := testCtx(t)
	p1 := start(t, s, Spec{ID: 1, Argv: []string{"/bin/sh", "-c", "sleep 1000 & exec sleep 1000"}})
	var pids []int
	waitFor(t, 5*time.Second, "the agent's child", func() bool {
		g, err := s.Group(1)
		pids = g.Pids
		return err == nil && len(pids) == 2
	})
	state := func(pid int) byte {
		st, err := readStat(pid)
		if err != nil {
			t.Fatal(err)
		}
		return st.state
	}
	if err := s.Freeze(ctx, 1, false); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		if c := state(pid); c != 'T' {
			t.Errorf("pid %d state %c after Freeze", pid, c)
		}
	}
	if self, eff, err := s.Frozen(1); err != nil || !self || !eff {
		t.Errorf("Frozen(1) = %v, %v, %v; want true, true", self, eff, err)
	}
	if err := s.Thaw(ctx, 1, false); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		if c := state(pid); c == 'T' {
			t.Errorf("pid %d still stopped after Thaw", pid)
		}
	}
	if self, eff, err := s.Frozen(1); err != nil || self || eff {
		t.Errorf("Frozen(1) after Thaw = %v, %v, %v", self, eff, err)
	}
	if _, ok := p1.Exit(); ok {
		t.Error("agent exited")
	}
}

// TestNoThreadPerChild: waiting is done in the netpoller, so 200 children
// cost 200 goroutines, not 200 threads.
func TestNoThreadPerChild(t *testing.T) {
	s := newCgroupSup(t, Config{})
	before := threadCount(t)
	for i := 1; i <= 200; i++ {
		start(t, s, sleeper(kin.AgentID(i), 0))
	}
	after := threadCount(t)
	t.Logf("threads: %d before, %d with 200 children", before, after)
	if after >= 30 {
		t.Errorf("%d threads with 200 children; want < 30", after)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestNoGoroutinePerChild: live processes are waited for by the
// supervisor's one reaping goroutine, not one goroutine each; when they all
// die at once, each exit is still reported, with its signal.
func TestNoGoroutinePerChild(t *testing.T) {
	both(t, func(t *testing.T, s *Supervisor) {
		const n = 200
		var reported atomic.Int64
		s.cfg.OnExit = func(e Exit) {
			if e.Signal == syscall.SIGKILL {
				reported.Add(1)
			}
		}
		before := runtime.NumGoroutine()
		procs := []*Process{start(t, s, sleeper(1, 0))}
		for i := 2; i <= n; i++ {
			procs = append(procs, start(t, s, sleeper(kin.AgentID(i), 1)))
		}
		after := runtime.NumGoroutine()
		t.Logf("goroutines: %d before, %d with %d children", before, after, n)
		if after-before >= 20 {
			t.Errorf("%d more goroutines with %d children; want fewer than 20", after-before, n)
		}
		if err := s.Stop(testCtx(t), 1, 0); err != nil {
			t.Fatal(err)
		}
		for _, p := range procs {
			if e, ok := p.Exit(); !ok || e.Signal != syscall.SIGKILL {
				t.Fatalf("agent %d: exit %v, %v; want killed", p.ID, e, ok)
			}
		}
		if got := reported.Load(); got != n {
			t.Errorf("OnExit reported %d kills, want %d", got, n)
		}
	})
}

func TestPeerInCgroup(t *testing.T) {
	both(t, func(t *testing.T, s *Supervisor) {
		p1 := start(t, s, sleeper(1, 0))
		p2 := start(t, s, sleeper(2, 1))
		for _, c := range []struct {
			pid  int
			id   kin.AgentID
			want bool
		}{
			{p1.Pid, 1, true},
			{p1.Pid, 2, false},
			{p2.Pid, 2, true},
			{p2.Pid, 1, false},
			{os.Getpid(), 1, false},
			{os.Getppid(), 1, false},
		} {
			if got := s.PeerInCgroup(c.pid, c.id); got != c.want {
				t.Errorf("PeerInCgroup(%d, %d) = %v, want %v", c.pid, c.id, got, c.want)
			}
		}
		if _, ok := s.AgentOfPID(os.Getpid()); ok {
			t.Error("AgentOfPID(self) found an agent")
		}
	})
}

// TestOrphanReaped: an orphan that exits on its own is reaped by the
// SIGCHLD sweep while its agent keeps running, and the sweep does not steal
// the status of a child that os/exec started elsewhere in the process.
func TestOrphanReaped(t *testing.T) {
	both(t, func(t *testing.T, s *Supervisor) {
		dir := t.TempDir()
		pids := filepath.Join(dir, "pids")
		env := []string{"PATH=/usr/bin:/bin", "PIDS=" + pids}
		p := start(t, s, Spec{ID: 1, Env: env, Argv: []string{"/bin/sh", "-c",
			`( setsid sh -c 'echo "orphan $$" >> "$PIDS"; exec sleep 1000' & ); exec sleep 1000`}})
		var orphan int
		waitFor(t, 5*time.Second, "the orphan", func() bool {
			orphan = readLabels(pids)["orphan"]
			if orphan == 0 {
				return false
			}
			st, err := readStat(orphan)
			return err == nil && st.ppid == os.Getpid()
		})
		w := watchPid(t, orphan)

		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 10 {
					err := exec.Command("/bin/sh", "-c", "exit 7").Run()
					var ee *exec.ExitError
					if !errors.As(err, &ee) || ee.ExitCode() != 7 {
						t.Errorf("os/exec child: %v, want exit status 7", err)
						return
					}
				}
			}()
		}
		if err := unix.Kill(orphan, unix.SIGKILL); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, "the orphan to be reaped", w.reaped)
		wg.Wait()
		if _, ok := p.Exit(); ok {
			t.Error("the agent exited")
		}
	})
}

func TestAdopt(t *testing.T) {
	name := uniqueName()
	a := newCgroupSup(t, Config{Name: name, KeepOnClose: true})
	p1 := start(t, a, sleeper(1, 0))
	p2 := start(t, a, sleeper(2, 1))
	w1, w2 := watchPid(t, p1.Pid), watchPid(t, p2.Pid)
	// A freeze of the child alone outlives the restart.
	if err := a.Freeze(testCtx(t), 2, false); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if e, _ := p1.Exit(); !errors.Is(e.Err, ErrClosed) {
		t.Fatalf("abandoned process: %v", e)
	}
	if w1.reaped() || w2.reaped() {
		t.Fatal("KeepOnClose killed the processes")
	}

	b := newCgroupSup(t, Config{Name: name})
	if b.Root() != a.Root() {
		t.Fatalf("roots differ: %s %s", a.Root(), b.Root())
	}
	groups, err := b.Discover()
	if err != nil {
		t.Fatal(err)
	}
	if len(groups) != 2 || groups[0].ID != 1 || groups[0].Parent != 0 || groups[1].ID != 2 || groups[1].Parent != 1 ||
		groups[0].Path != p1.Cgroup || groups[1].Path != p2.Cgroup || groups[1].Self != p2.SelfCgroup() {
		t.Fatalf("Discover: %+v", groups)
	}
	for i, want := range []int{p1.Pid, p2.Pid} {
		if g := groups[i]; !g.Populated || len(g.Pids) != 1 || g.Pids[0] != want {
			t.Errorf("group %d: %+v, want pid %d", g.ID, g, want)
		}
	}
	for _, g := range groups {
		if _, err := b.Adopt(g.Path); err != nil {
			t.Fatal(err)
		}
	}
	if !b.PeerInCgroup(p2.Pid, 2) || b.PeerInCgroup(p2.Pid, 1) || !b.PeerInCgroup(p1.Pid, 1) || b.PeerInCgroup(p1.Pid, 2) {
		t.Error("adopted agents' processes are misattributed")
	}
	if self, eff, err := b.Frozen(2); err != nil || !self || !eff {
		t.Errorf("adopted Frozen(2) = %v, %v, %v; want the freeze of the earlier run", self, eff, err)
	}
	if self, eff, err := b.Frozen(1); err != nil || self || eff {
		t.Errorf("adopted Frozen(1) = %v, %v, %v; want not frozen", self, eff, err)
	}
	if err := b.Thaw(testCtx(t), 2, false); err != nil {
		t.Fatal(err)
	}
	if _, eff, err := b.Frozen(2); err != nil || eff {
		t.Errorf("adopted Frozen(2) after Thaw: %v, %v", eff, err)
	}
	if err := b.Stop(testCtx(t), 1, 0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "adopted processes to be killed and reaped", func() bool { return w1.reaped() && w2.reaped() })
	if _, err := os.Stat(groups[0].Path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("adopted group %s still exists", groups[0].Path)
	}
}

// TestStopRacesStart: children started while their parent is being
// stopped are either refused or killed with it; none runs on in a removed
// group.
func TestStopRacesStart(t *testing.T) {
	both(t, func(t *testing.T, s *Supervisor) {
		ctx := testCtx(t)
		start(t, s, sleeper(1, 0))
		var wg sync.WaitGroup
		var mu sync.Mutex
		var started []*Process
		for i := range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p, err := s.Start(ctx, sleeper(kin.AgentID(100+i), 1))
				if err != nil {
					if !errors.Is(err, ErrStopping) {
						t.Errorf("Start during Stop: %v", err)
					}
					return
				}
				mu.Lock()
				started = append(started, p)
				mu.Unlock()
			}()
		}
		if err := s.Stop(ctx, 1, 0); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		for _, p := range started {
			if _, done := p.Exit(); done {
				continue
			}
			// Started after the Stop finished: it lives in a new group.
			if got, ok := s.AgentOfPID(p.Pid); !ok || got != p.ID {
				t.Errorf("pid %d of agent %d runs outside any group (got %d, %v)", p.Pid, p.ID, got, ok)
			}
		}
	})
}

func TestOutput(t *testing.T) {
	both(t, func(t *testing.T, s *Supervisor) {
		var w syncBuffer
		p := start(t, s, Spec{ID: 1, Argv: []string{"/bin/sh", "-c", "echo out; echo err >&2"}, Stdout: &w, Stderr: &w})
		waitExit(t, p)
		waitFor(t, 5*time.Second, "output", func() bool { return w.String() == "out\nerr\n" })

		log := filepath.Join(t.TempDir(), "agent.log")
		p = start(t, s, Spec{ID: 2, Argv: []string{"/bin/sh", "-c", "echo out; echo err >&2"}, LogPath: log})
		waitExit(t, p)
		if b, err := os.ReadFile(log); err != nil || string(b) != "out\nerr\n" {
			t.Errorf("log file: %q, %v", b, err)
		}
	})
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func TestClose(t *testing.T) {
	both(t, func(t *testing.T, s *Supervisor) {
		p := start(t, s, sleeper(1, 0))
		c := start(t, s, sleeper(2, 1))
		u := start(t, s, sleeper(4, 3)) // parent 3 is not supervised: an empty group
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		for _, p := range []*Process{p, c, u} {
			if e, ok := p.Exit(); !ok || e.Signal != syscall.SIGKILL {
				t.Errorf("agent %d after Close: %v, %v", p.ID, e, ok)
			}
		}
		if _, err := s.Start(testCtx(t), sleeper(5, 0)); !errors.Is(err, ErrClosed) {
			t.Errorf("Start after Close: %v", err)
		}
		if err := s.Stop(testCtx(t), 1, 0); !errors.Is(err, ErrClosed) {
			t.Errorf("Stop after Close: %v", err)
		}
	})
}

// TestCloseStopsGoroutines: waiters, output copiers and the sweeper all end
// with Close, whether it kills the processes or leaves them running.
func TestCloseStopsGoroutines(t *testing.T) {
	for _, keep := range []bool{false, true} {
		before := runtime.NumGoroutine()
		s := newSup(t, Config{KeepOnClose: keep})
		var out syncBuffer
		var ps []*Process
		for i := range 5 {
			ps = append(ps, start(t, s, Spec{ID: kin.AgentID(i + 1), Argv: []string{"sleep", "1000"}, Stdout: &out}))
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		// os/signal's own loop may start with the first Notify.
		waitFor(t, 5*time.Second, "goroutines to end", func() bool { return runtime.NumGoroutine() <= before+1 })
		if keep {
			// Left running, as asked: kill them here (they are in the root,
			// which the next supervisor of this name would adopt).
			for _, p := range ps {
				unix.Kill(p.Pid, unix.SIGKILL)
				var ws unix.WaitStatus
				unix.Wait4(p.Pid, &ws, 0, nil)
			}
			if root := s.Root(); root != "" {
				if err := cgroup.RemoveTree(root); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

// TestDeferRemove: with DeferRemove, Stop returns once the processes are
// dead and reaped; the emptied groups go soon after, and by Close at the
// latest.
func TestDeferRemove(t *testing.T) {
	s := newCgroupSup(t, Config{DeferRemove: true})
	ctx := testCtx(t)
	parent := start(t, s, sleeper(1, 0))
	child := start(t, s, sleeper(2, 1))
	group := filepath.Dir(child.SelfCgroup()) // <root>/a1/a2
	if err := s.Stop(ctx, 1, 0); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*Process{parent, child} {
		if _, ok := p.Exit(); !ok {
			t.Fatalf("agent %d not reaped when Stop returned", p.ID)
		}
	}
	waitFor(t, 10*time.Second, "the stopped groups to be removed", func() bool {
		_, err := os.Stat(group)
		return errors.Is(err, os.ErrNotExist)
	})
	if _, err := s.Group(1); !errors.Is(err, ErrUnknownAgent) {
		t.Fatalf("a stopped agent is still known: %v", err)
	}
	// A new agent with a fresh group works while removals may run.
	start(t, s, sleeper(3, 0))
}

// TestHoldRemovals: under a hold (HoldRemovals), the groups Stop emptied
// stay until the hold is released, then go; a hold never released is
// released by Close, which leaves no group behind.
func TestHoldRemovals(t *testing.T) {
	s := newCgroupSup(t, Config{DeferRemove: true})
	ctx := testCtx(t)
	start(t, s, sleeper(1, 0))
	child := start(t, s, sleeper(2, 1))
	other := start(t, s, sleeper(3, 0))
	group, otherGroup := filepath.Dir(child.SelfCgroup()), other.Cgroup
	hctx, release := s.HoldRemovals(ctx)
	if err := s.Stop(hctx, 1, 0); err != nil {
		t.Fatal(err)
	}
	if _, ok := child.Exit(); !ok {
		t.Fatal("agent 2 not reaped when Stop returned")
	}
	// Nothing removes them while held: a later Stop's removal (not held)
	// runs and ends meanwhile, and they are still there after it.
	if err := s.Stop(ctx, 3, 0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the unheld group to be removed", func() bool {
		_, err := os.Stat(otherGroup)
		return errors.Is(err, os.ErrNotExist)
	})
	if _, err := os.Stat(group); err != nil {
		t.Fatalf("a held group was removed before its release: %v", err)
	}
	release()
	waitFor(t, 10*time.Second, "the held groups to be removed once released", func() bool {
		_, err := os.Stat(group)
		return errors.Is(err, os.ErrNotExist)
	})
	release() // twice is fine

	// A hold never released: Close removes its groups.
	p := start(t, s, sleeper(4, 0))
	hctx, _ = s.HoldRemovals(ctx)
	if err := s.Stop(hctx, 4, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p.Cgroup); err != nil {
		t.Fatalf("a held group was removed before its release: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p.Cgroup); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a held group after Close: %v", err)
	}
}

// TestStopReapsWhatItKilled: a Stop that kills a group reaps the group's
// supervised processes itself, each by its pid, while it holds the
// process-wide reaping loop (whose waitid(P_ALL) walks every child of the
// daemon: O(live agents) an exit). Here another Stop's hold is in place
// for the whole test, so the loop reaps nothing: the Stop still returns
// with every exit reported (it waited on the loop before, and would time
// out), while an agent that exits by itself meanwhile is reaped once the
// hold is released.
func TestStopReapsWhatItKilled(t *testing.T) {
	s := newCgroupSup(t, Config{})
	ctx := testCtx(t)
	start(t, s, sleeper(1, 0))
	var kids []*Process
	for id := kin.AgentID(2); id <= 21; id++ {
		kids = append(kids, start(t, s, sleeper(id, 1)))
	}
	release := holdReaping()
	defer release()
	quick := start(t, s, Spec{ID: 30, Argv: []string{"/bin/true"}})
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := s.Stop(sctx, 1, 0); err != nil {
		t.Fatalf("Stop while the loop is held: %v", err)
	}
	for _, p := range kids {
		ex, ok := p.Exit()
		if !ok {
			t.Fatalf("agent %d not reaped when Stop returned", p.ID)
		}
		if ex.Signal != syscall.SIGKILL {
			t.Errorf("agent %d: %s, want killed", p.ID, ex)
		}
	}
	if _, ok := quick.Exit(); ok {
		t.Fatal("an agent that exited by itself was reaped while the loop was held: the test holds nothing")
	}
	release()
	if ex := waitExit(t, quick); ex.Code != 0 {
		t.Fatalf("agent 30 after the release: %s, want exit 0", ex)
	}
}

// TestStopRemovesUnknownGroups: groups kin did not make, inside an agent's
// group, beside and inside its self leaf and in a child's group, make
// those groups' rmdir fail; Stop then reads and removes just them (the
// fallback of removeGroups), and nothing of the subtree is left, removed
// at once or in the background (DeferRemove).
func TestStopRemovesUnknownGroups(t *testing.T) {
	for _, deferred := range []bool{false, true} {
		t.Run(fmt.Sprintf("DeferRemove=%v", deferred), func(t *testing.T) {
			s := newCgroupSup(t, Config{DeferRemove: deferred})
			ctx := testCtx(t)
			parent := start(t, s, sleeper(1, 0))
			child := start(t, s, sleeper(2, 1))
			sibling := start(t, s, sleeper(3, 0)) // outside the subtree: stays
			a1, a2 := parent.Cgroup, child.Cgroup
			unknown := []string{
				filepath.Join(a1, "x", "y"),           // beside the leaf, nested
				filepath.Join(a1, SelfLeaf, "sub"),    // inside the leaf
				filepath.Join(a2, "z"),                // in the child's group
				filepath.Join(a2, SelfLeaf, "w", "v"), // deep in the child's leaf
			}
			for _, d := range unknown {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.Stop(ctx, 1, 0); err != nil {
				t.Fatal(err)
			}
			for _, p := range []*Process{parent, child} {
				if _, ok := p.Exit(); !ok {
					t.Fatalf("agent %d not reaped when Stop returned", p.ID)
				}
			}
			waitFor(t, 10*time.Second, "the stopped subtree's groups to be removed", func() bool {
				_, err := os.Stat(a1)
				return errors.Is(err, os.ErrNotExist)
			})
			// Only the other agent's group is left under the root.
			ents, err := os.ReadDir(s.Root())
			if err != nil {
				t.Fatal(err)
			}
			var dirs []string
			for _, e := range ents {
				if e.IsDir() {
					dirs = append(dirs, e.Name())
				}
			}
			if want := filepath.Base(sibling.Cgroup); len(dirs) != 1 || dirs[0] != want {
				t.Errorf("groups under the root after the stop: %v, want only %s", dirs, want)
			}
			if _, ok := sibling.Exit(); ok {
				t.Error("the agent outside the stopped subtree ended")
			}
		})
	}
}

// TestKillAllEndsStopsInTheirGrace: two stops of TERM-ignoring agents with an
// hour's grace are in progress; KillAll kills every process at once, and both
// stops return (their processes reaped with SIGKILL) long before their grace.
func TestKillAllEndsStopsInTheirGrace(t *testing.T) {
	both(t, func(t *testing.T, s *Supervisor) {
		dir := t.TempDir()
		pids := filepath.Join(dir, "pids")
		env := []string{"PATH=/usr/bin:/bin", "PIDS=" + pids}
		deaf := writeScript(t, dir, "deaf.sh", `trap '' TERM
echo "$1 $$" >> "$PIDS"
exec sleep 1000
`)
		p1 := start(t, s, Spec{ID: 1, Argv: []string{"/bin/sh", deaf, "one"}, Env: env})
		p2 := start(t, s, Spec{ID: 2, Argv: []string{"/bin/sh", deaf, "two"}, Env: env})
		waitFor(t, 10*time.Second, "both agents to ignore SIGTERM", func() bool { return len(readLabels(pids)) == 2 })
		stopped := make(chan error, 2)
		for _, id := range []kin.AgentID{1, 2} {
			go func() { stopped <- s.Stop(testCtx(t), id, time.Hour) }()
		}
		// Both stops have sent SIGTERM (the agents are stopping) before the kill.
		waitFor(t, 10*time.Second, "both stops to begin", func() bool {
			s.mu.Lock()
			defer s.mu.Unlock()
			return s.agents[1] != nil && s.agents[1].stopping != nil && s.agents[2] != nil && s.agents[2].stopping != nil
		})
		if err := s.KillAll(); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			select {
			case err := <-stopped:
				if err != nil {
					t.Fatalf("stop: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("a stop did not return after KillAll")
			}
		}
		for _, p := range []*Process{p1, p2} {
			if e, ok := p.Exit(); !ok || e.Signal != syscall.SIGKILL {
				t.Errorf("agent %d after KillAll: %v, %v", p.ID, e, ok)
			}
		}
	})
}

// TestStopSignalsUnknownGroups: a process in a group kin did not make,
// inside a stopped agent's group, gets SIGTERM with the agent's own (the
// stop finds that group although its records do not name it), not only
// the cgroup.kill at the end of the grace.
func TestStopSignalsUnknownGroups(t *testing.T) {
	s := newCgroupSup(t, Config{})
	ctx := testCtx(t)
	dir := t.TempDir()
	noted := filepath.Join(dir, "noted")
	parent := start(t, s, sleeper(1, 0))
	start(t, s, sleeper(2, 1))
	unknown := filepath.Join(parent.Cgroup, "x", "y")
	if err := os.MkdirAll(unknown, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/bin/sh", "-c", `trap 'echo term >> "$NOTED"; exit 0' TERM; echo ready >> "$NOTED"; while :; do sleep 0.05; done`)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "NOTED=" + noted}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	if err := os.WriteFile(filepath.Join(unknown, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the process in the unknown group to be ready", func() bool {
		b, _ := os.ReadFile(noted)
		return strings.Contains(string(b), "ready")
	})
	if err := s.Stop(ctx, 1, time.Minute); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(noted); !strings.Contains(string(b), "term") {
		t.Errorf("the process in a group kin did not make got no SIGTERM: %q", b)
	}
}

// TestStartInAClosedDirectorySaysWhichDirectory: an agent whose working
// directory lies under a directory its uid may not enter (a checkout in a
// mktemp -d directory, mode 0700) is refused with an error that names that
// directory, its mode and the fix, not only the program.
func TestStartInAClosedDirectorySaysWhichDirectory(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the agent runs as another uid")
	}
	s := newSup(t, Config{})
	tmp := t.TempDir()
	// The test's own temporary directories are 0700: opened to search, so
	// that the one closed on the way is the test's.
	for _, d := range []string{filepath.Dir(tmp), tmp} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	closed := filepath.Join(tmp, "closed")
	if err := os.Mkdir(closed, 0o700); err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(closed, "checkout", "pkg")
	if err := os.MkdirAll(work, 0o755); err != nil {
		t.Fatal(err)
	}
	sp := sleeper(1, 0)
	sp.Env = []string{"PATH=/usr/bin:/bin"}
	sp.Credential = &syscall.Credential{Uid: 65534, Gid: 65534}
	sp.Dir = work
	_, err := s.Start(testCtx(t), sp)
	if err == nil {
		t.Fatal("an agent started in a directory its uid cannot enter")
	}
	for _, want := range []string{"working directory " + work, "uid 65534", closed + " is mode 0700", "chmod o+x " + closed} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal %q does not say %q", err, want)
		}
	}
	if !errors.Is(err, fs.ErrPermission) {
		t.Errorf("the refusal %v is not a permission error", err)
	}
	// Reachable once opened: the same start works.
	if err := os.Chmod(closed, 0o711); err != nil {
		t.Fatal(err)
	}
	sp.ID = 2
	p := start(t, s, sp)
	if err := s.Stop(testCtx(t), 2, 0); err != nil {
		t.Fatal(err)
	}
	waitExit(t, p)
}

// TestKeepOnCloseLeavesNothingWhenNothingRuns: a supervisor that keeps its
// groups for the next one (a daemon run with --leave-running) keeps them
// while a process runs in them, and removes its root when none does (its
// agents all ended, or none started): a run that kept nothing leaves no
// group behind.
func TestKeepOnCloseLeavesNothingWhenNothingRuns(t *testing.T) {
	name := uniqueName()
	a := newCgroupSup(t, Config{Name: name, KeepOnClose: true})
	start(t, a, sleeper(1, 0))
	if err := a.Stop(testCtx(t), 1, 0); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(a.Root()); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the root %s of a supervisor that kept nothing running is still there (stat: %v)", a.Root(), err)
	}

	b := newCgroupSup(t, Config{Name: name, KeepOnClose: true})
	p := start(t, b, sleeper(2, 0))
	w := watchPid(t, p.Pid)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if w.reaped() {
		t.Fatal("KeepOnClose killed the process")
	}
	if _, err := os.Stat(p.Cgroup); err != nil {
		t.Fatalf("the group of a process left running is gone: %v", err)
	}
	// The test's own cleanup: the next supervisor of the name ends it.
	c := newCgroupSup(t, Config{Name: name})
	if c.Root() != b.Root() {
		t.Fatalf("roots differ: %s %s", b.Root(), c.Root())
	}
	unix.Kill(p.Pid, unix.SIGKILL)
	waitFor(t, 10*time.Second, "the left process to end", w.reaped)
}
