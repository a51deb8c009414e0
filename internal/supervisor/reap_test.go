package supervisor

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kin-agents/kin/internal/supervisor/cgroup"
	"github.com/kin-agents/kin/kin"
)

// openFDs counts this process's open descriptors.
func openFDs(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// TestNoDescriptorPerChild: a live supervised process holds none of the
// daemon's descriptors (issue 22: a pidfd each ran a 5,000-agent daemon out
// of them); their exits are still reported, each with its status.
func TestNoDescriptorPerChild(t *testing.T) {
	both(t, func(t *testing.T, s *Supervisor) {
		const n = 100
		before := openFDs(t)
		var procs []*Process
		for i := 1; i <= n; i++ {
			procs = append(procs, start(t, s, sleeper(kin.AgentID(i), 0)))
		}
		after := openFDs(t)
		t.Logf("descriptors: %d before, %d with %d children", before, after, n)
		if after-before >= n/10 {
			t.Errorf("%d more descriptors with %d children; want fewer than %d", after-before, n, n/10)
		}
		for _, p := range procs[:n/2] {
			if err := p.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
		}
		for _, p := range procs[:n/2] {
			if e := waitExit(t, p); e.Signal != syscall.SIGTERM {
				t.Errorf("agent %d: %v, want killed by SIGTERM", p.ID, e)
			}
			if err := p.Signal(syscall.SIGTERM); err != ErrProcessDone {
				t.Errorf("signal after the reap: %v, want ErrProcessDone", err)
			}
		}
	})
}

// TestExitFoundBehindAForeignZombie: an exited child that is no supervised
// process (a child of other code in the daemon, not yet waited for) is the
// first the kernel names; the supervised processes that exit after it are
// still reaped and reported, and it is left for its own waiter.
func TestExitFoundBehindAForeignZombie(t *testing.T) {
	s := newCgroupSup(t, Config{})
	// Started outside the supervisor, in the daemon's own group and
	// process group (no sweep reaps them), from several threads: the
	// kernel lists each thread's children apart, and looks at the calling
	// thread's first.
	const threads = 8
	pids := make(chan int, threads)
	hold := make(chan struct{})
	defer close(hold)
	for range threads {
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			pid, err := syscall.ForkExec("/bin/true", []string{"true"}, &syscall.ProcAttr{})
			if err != nil {
				pid = -1
			}
			pids <- pid
			<-hold
		}()
	}
	var foreign []int
	for range threads {
		if pid := <-pids; pid > 0 {
			foreign = append(foreign, pid)
		}
	}
	t.Cleanup(func() {
		for _, pid := range foreign {
			var ws syscall.WaitStatus
			syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
		}
	})
	if len(foreign) == 0 {
		t.Fatal("no foreign child started")
	}
	waitFor(t, 10*time.Second, "the foreign children to exit", func() bool {
		for _, pid := range foreign {
			var si siginfoChild
			if err := waitid(unix.P_PID, pid, &si, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil); err != nil || si.Pid == 0 {
				return false
			}
		}
		return true
	})
	for i := 1; i <= 5; i++ {
		p := start(t, s, Spec{ID: kin.AgentID(i), Argv: []string{"sh", "-c", "exit " + strconv.Itoa(i)}})
		if e := waitExit(t, p); e.Code != i {
			t.Fatalf("agent %d: %v, want exit status %d", i, e, i)
		}
	}
	q := start(t, s, sleeper(9, 0))
	q.Signal(syscall.SIGKILL)
	if e := waitExit(t, q); e.Signal != syscall.SIGKILL {
		t.Fatalf("agent 9: %v, want killed", e)
	}
	pid := foreign[0]
	var ws syscall.WaitStatus
	if got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil); got != pid || err != nil || ws.ExitStatus() != 0 {
		t.Fatalf("the foreign child's status: %d %v %v, want it left for its waiter", got, err, ws)
	}
}

// TestConcurrentStopsReapTheirOrphans: stops of many groups at once (a
// shutdown's) share their lists of the process's children
// (unclaimedChildren), and each still returns only once the orphans its
// group's processes left, re-parented to this process, are reaped.
func TestConcurrentStopsReapTheirOrphans(t *testing.T) {
	s := newCgroupSup(t, Config{})
	const n = 12
	dir := t.TempDir()
	ws := make([]pidWatch, n)
	for i := range n {
		pids := filepath.Join(dir, fmt.Sprintf("pids%d", i))
		env := []string{"PATH=/usr/bin:/bin", "PIDS=" + pids}
		start(t, s, Spec{ID: kin.AgentID(i + 1), Env: env, Argv: []string{"/bin/sh", "-c",
			`( setsid sh -c 'echo "orphan $$" >> "$PIDS"; exec sleep 1000' & ); exec sleep 1000`}})
		var orphan int
		waitFor(t, 5*time.Second, "an orphan", func() bool {
			orphan = readLabels(pids)["orphan"]
			if orphan == 0 {
				return false
			}
			st, err := readStat(orphan)
			return err == nil && st.ppid == os.Getpid()
		})
		ws[i] = watchPid(t, orphan)
	}
	ctx := testCtx(t)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if err := s.Stop(ctx, kin.AgentID(i+1), 0); err != nil {
				t.Errorf("Stop %d: %v", i+1, err)
				return
			}
			if !ws[i].reaped() {
				t.Errorf("agent %d's orphan is not reaped when its Stop returns", i+1)
			}
		})
	}
	wg.Wait()
}

// TestReapDyingReapsAsTheKillEndsThem: with the reaping loop held, as a
// Stop holds it from its kill, reapDying alone reaps every process of a
// killed subtree of more than reapDyingMin agents, each reported killed,
// before it is told to stop (a Stop tells it once the group is empty and
// reaps what it did not reach: reapKilled).
func TestReapDyingReapsAsTheKillEndsThem(t *testing.T) {
	s := newCgroupSup(t, Config{})
	root := start(t, s, sleeper(1, 0))
	procs := []*Process{root}
	// Three levels, as a cascade's tree: parents before children.
	next := kin.AgentID(2)
	for range 6 {
		mid := start(t, s, sleeper(next, 1))
		procs = append(procs, mid)
		parent := next
		next++
		for range 12 {
			procs = append(procs, start(t, s, sleeper(next, parent)))
			next++
		}
	}
	if len(procs) < reapDyingMin {
		t.Fatalf("%d processes: reapDying leaves fewer than %d to reapKilled", len(procs), reapDyingMin)
	}
	release := holdReaping()
	defer release()
	stop := s.reapDying(procs)
	defer stop()
	if err := cgroup.Kill(root.Cgroup); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "reapDying to reap every killed process", func() bool {
		for _, p := range procs {
			if !isDone(p) {
				return false
			}
		}
		return true
	})
	stop()
	for _, p := range procs {
		if ex, _ := p.Exit(); ex.Signal != syscall.SIGKILL {
			t.Errorf("agent %d: %s, want killed", p.ID, ex)
		}
	}
}

// TestComparePreorder: group paths sort as the kernel walks a subtree, a
// group before the groups in it and siblings by their ids.
func TestComparePreorder(t *testing.T) {
	got := []string{"r/a1/a12", "r/a1/a3/a100", "r/a2", "r/a1", "r/a1/a3", "r/a10", "r/a1/a3/a20", "r/a1/a12/a7"}
	slices.SortFunc(got, comparePreorder)
	want := []string{"r/a1", "r/a1/a3", "r/a1/a3/a20", "r/a1/a3/a100", "r/a1/a12", "r/a1/a12/a7", "r/a2", "r/a10"}
	if !slices.Equal(got, want) {
		t.Errorf("sorted:\n got %v\nwant %v", got, want)
	}
	for _, c := range []struct {
		a, b string
		want int
	}{{"r/a1", "r/a1", 0}, {"r/a1", "r/a1/a2", -1}, {"r/a1/a2", "r/a1", 1}, {"r/a1/a9", "r/a10", -1}, {"r/a12", "r/a1/a3", 1}} {
		if got := comparePreorder(c.a, c.b); got != c.want {
			t.Errorf("comparePreorder(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
	// Against comparing component by component, over random trees.
	byComponents := func(a, b string) int {
		as, bs := strings.Split(a, "/"), strings.Split(b, "/")
		for i := 0; i < len(as) && i < len(bs); i++ {
			if c := cmp.Or(cmp.Compare(len(as[i]), len(bs[i])), strings.Compare(as[i], bs[i])); c != 0 {
				return c
			}
		}
		return cmp.Compare(len(as), len(bs))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	path := func() string {
		p := "r"
		for range 1 + rng.IntN(4) {
			p += "/a" + strconv.Itoa(rng.IntN(120))
		}
		return p
	}
	for range 20000 {
		a, b := path(), path()
		if got, want := comparePreorder(a, b), byComponents(a, b); got != want {
			t.Fatalf("comparePreorder(%q, %q) = %d, component by component %d", a, b, got, want)
		}
	}
}

// TestPeekExitBeforeTheReap: a process that has exited and is not reaped
// yet tells how it ended (PeekExit), and is left a zombie for the reaper,
// whose Exit then says the same; one that runs tells nothing.
func TestPeekExitBeforeTheReap(t *testing.T) {
	s := newCgroupSup(t, Config{})
	release := holdReaping()
	defer release()
	running := start(t, s, sleeper(1, 0))
	exited := start(t, s, Spec{ID: 2, Argv: []string{"sh", "-c", "exit 7"}})
	killed := start(t, s, sleeper(3, 0))
	if err := syscall.Kill(killed.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "both processes exited", func() bool {
		_, ok1 := exited.PeekExit()
		_, ok2 := killed.PeekExit()
		return ok1 && ok2
	})
	if e, ok := running.PeekExit(); ok {
		t.Errorf("a running process peeked as ended: %s", e)
	}
	e, _ := exited.PeekExit()
	k, _ := killed.PeekExit()
	if e.Code != 7 || e.Signal != 0 || k.Code != -1 || k.Signal != syscall.SIGKILL {
		t.Fatalf("peeked %s and %s, want exit 7 and killed", e, k)
	}
	for _, p := range []*Process{exited, killed} {
		if isDone(p) {
			t.Fatalf("pid %d reaped while the reaping was held", p.Pid)
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.Pid))
		if err != nil {
			t.Fatalf("pid %d after the peek: %v (the peek reaped it)", p.Pid, err)
		}
		if f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:])); len(f) == 0 || f[0] != "Z" {
			t.Fatalf("pid %d after the peek: state %v, want a zombie", p.Pid, f[:1])
		}
	}
	release()
	if got := waitExit(t, exited); got.Code != 7 || got.Signal != 0 {
		t.Errorf("reaped: %s, want exit 7", got)
	}
	if got := waitExit(t, killed); got.Signal != syscall.SIGKILL {
		t.Errorf("reaped: %s, want killed", got)
	}
	if _, ok := exited.PeekExit(); !ok {
		t.Error("a reaped process peeked as running")
	}
}

// TestOnEmptyBeforeTheLastReaps: a Stop given OnEmpty calls it once the
// killed group is empty, with every agent its groups hold, before it has
// reaped any of them (fewer than reapDyingMin: none is reaped as it dies),
// and each of them tells how it ended by then or once reaped.
func TestOnEmptyBeforeTheLastReaps(t *testing.T) {
	s := newCgroupSup(t, Config{})
	root := start(t, s, sleeper(1, 0))
	procs := []*Process{root}
	for id := kin.AgentID(2); id <= 5; id++ {
		procs = append(procs, start(t, s, sleeper(id, 1)))
	}
	other := start(t, s, sleeper(9, 0))
	var covered []kin.AgentID
	calls, reaped := 0, 0
	peeked := make([]bool, len(procs))
	ctx := OnEmpty(testCtx(t), func(ids []kin.AgentID) {
		calls++
		covered = slices.Clone(ids)
		for i, p := range procs {
			if isDone(p) {
				reaped++
			}
			// False only for one that left the group and is not a
			// zombie yet: its reaping, after this, tells.
			_, peeked[i] = p.PeekExit()
		}
	})
	if err := s.Stop(ctx, 1, 0); err != nil {
		t.Fatal(err)
	}
	slices.Sort(covered)
	if calls != 1 || !slices.Equal(covered, []kin.AgentID{1, 2, 3, 4, 5}) {
		t.Fatalf("OnEmpty called %d times with %v, want once with agents 1-5", calls, covered)
	}
	if reaped != 0 {
		t.Fatalf("at OnEmpty %d of %d killed processes were reaped already", reaped, len(procs))
	}
	for i, p := range procs {
		e, ok := p.PeekExit()
		if !ok || e.Signal != syscall.SIGKILL {
			t.Errorf("agent %d after the Stop: %s (%v; peeked at OnEmpty: %v), want killed", p.ID, e, ok, peeked[i])
		}
	}
	if isDone(other) {
		t.Error("the Stop of agent 1 ended agent 9, outside its group")
	}
}
