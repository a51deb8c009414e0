package sandbox

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestEveryShimTestPassesDirect runs every other test of this package
// again with their helper starts made without the shim where PrepareDirect
// can (directEnv), as the supervisor makes them, and checks that some were.
func TestEveryShimTestPassesDirect(t *testing.T) {
	requireLandlock(t)
	if directMode {
		t.Skip("already the direct run")
	}
	cmd := exec.Command(testExe(t), "-test.count=1", "-test.skip=^TestEveryShimTestPassesDirect$")
	cmd.Env = append(os.Environ(), directEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the tests without the shim: %v\n%s", err, out)
	}
	m := regexp.MustCompile(regexp.QuoteMeta(directCountsLine) + ` (\d+) (\d+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("the direct run did not count its starts:\n%s", out)
	}
	direct, _ := strconv.Atoi(string(m[1]))
	shim, _ := strconv.Atoi(string(m[2]))
	t.Logf("%d helper starts without the shim, %d through it", direct, shim)
	if direct < 10 {
		t.Errorf("only %d helper starts were made without the shim (%d through it)", direct, shim)
	}
}

// directRun prepares spec (files as its descriptors 3 and up) and starts
// it without the shim, which it must be.
func directRun(t *testing.T, spec Spec, files []*os.File, cred *syscall.Credential) run {
	t.Helper()
	d, err := PrepareDirect(spec, files, cred)
	if err != nil {
		t.Fatalf("PrepareDirect: %v", err)
	}
	r, ok, err := startDirect(d, append(os.Environ(), helperEnv+"=1"), cred)
	if err != nil || !ok {
		t.Fatalf("direct start: started %v, %v", ok, err)
	}
	return r
}

// TestDirectLimitsHoldAtTheFirstInstruction: the command reads its own
// /proc/self/limits as the first thing it does; the daemon's own limits
// are untouched.
func TestDirectLimitsHoldAtTheFirstInstruction(t *testing.T) {
	requireLandlock(t)
	var before unix.Rlimit
	unix.Getrlimit(unix.RLIMIT_NOFILE, &before)
	for _, restrict := range []bool{true, false} {
		spec := Spec{
			Restrict:         restrict,
			RO:               DefaultSystemRO(),
			CPUSeconds:       37,
			Processes:        321,
			InheritOpenFiles: &OpenFilesLimit{Soft: 100, Hard: 200},
			Argv:             []string{"/bin/cat", "/proc/self/limits"},
		}
		r := directRun(t, spec, nil, nil)
		if r.code != 0 {
			t.Fatalf("cat: exit %d, stderr %q", r.code, r.stderr)
		}
		limits := parseLimits(t, r.stdout)
		for name, want := range map[string][2]string{
			"Max cpu time":      {"37", "37"},
			"Max processes":     {"321", "321"},
			"Max open files":    {"100", "200"},
			"Max address space": {"unlimited", "unlimited"},
		} {
			if got := limits[name]; got != want {
				t.Errorf("restrict %v: %s: soft, hard = %v, want %v", restrict, name, got, want)
			}
		}
	}
	var after unix.Rlimit
	unix.Getrlimit(unix.RLIMIT_NOFILE, &after)
	if after != before {
		t.Errorf("the daemon's own RLIMIT_NOFILE changed: %v, was %v", after, before)
	}
}

// TestDirectAgentOfItsOwnUIDGetsWhatTheShimGives: an agent of its own
// uid, started without the shim as a root daemon starts it: its grants
// were opened as it (a folder closed to it gets no rule, as in the shim),
// it reads what is granted, not kin's home, cannot signal the daemon,
// holds only stdio and has its limits.
func TestDirectAgentOfItsOwnUIDGetsWhatTheShimGives(t *testing.T) {
	requireLandlock(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root to run the agent as another uid")
	}
	if ABI() < directScopeABI {
		t.Skipf("Landlock ABI %d: direct starts with the signal scope need %d", ABI(), directScopeABI)
	}
	base := tempDir(t)
	openChain(t, base)
	home := filepath.Join(base, "kin-home")
	work := filepath.Join(base, "work")
	closed := filepath.Join(base, "closed")
	for _, d := range []string{home, work, closed} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.Chown(work, 65534, 65534)
	os.Chmod(closed, 0o700)
	writeFile(t, filepath.Join(home, "operator.token"), "secret")
	writeFile(t, filepath.Join(closed, "f"), "closed")
	exe := filepath.Join(base, "probe")
	copyFile(t, testExe(t), exe, 0o755)
	leak, err := unix.Open(filepath.Join(home, "operator.token"), unix.O_RDONLY, 0) // not close-on-exec
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(leak)

	v := NewView([]string{home}, []string{exe})
	defer v.Close()
	fd, err := v.Ruleset(ABI(), true, 65534, []int{65534})
	if err != nil {
		t.Fatalf("Ruleset: %v", err)
	}
	view := os.NewFile(uintptr(fd), "view")
	defer view.Close()
	spec := Spec{Restrict: true, All: true, Hidden: []string{home}, RO: []string{exe}, RW: []string{work, closed},
		ScopeSignals: true, ViewFD: 3, OpenFiles: 64,
		Argv: []string{exe, "probe",
			"read:" + filepath.Join(home, "operator.token"),
			"list:" + home,
			"write:" + filepath.Join(work, "out"),
			"kill:" + strconv.Itoa(os.Getpid()),
			"fdsof:" + filepath.Join(home, "operator.token"),
			"read:/etc/hostname",
		}}
	cred := &syscall.Credential{Uid: 65534, Gid: 65534}
	// Should the agent's SIGTERM reach this process, it fails the
	// test rather than ending it.
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	defer signal.Stop(term)
	r := directRun(t, spec, []*os.File{view}, cred)
	res := parseProbe(t, r)
	expect(t, res[0], false)
	expect(t, res[1], false)
	expect(t, res[2], true)
	expect(t, res[3], false)
	if !res[4].OK || res[4].N != 0 {
		t.Errorf("the agent holds %d descriptor(s) of kin's token the daemon had open: %+v", res[4].N, res[4])
	}
	expect(t, res[5], true)
	select {
	case <-term:
		t.Error("the agent's SIGTERM reached the daemon")
	default:
	}
}

// TestDirectGrantClosedToTheAgentGetsNoRule: a granted folder the agent's
// user cannot enter when it starts gets no rule (the shim, as the agent,
// could not open it): opened to it afterwards, Landlock still refuses.
func TestDirectGrantClosedToTheAgentGetsNoRule(t *testing.T) {
	requireLandlock(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root to run the agent as another uid")
	}
	base := tempDir(t)
	openChain(t, base)
	closed := filepath.Join(base, "closed")
	inner := filepath.Join(closed, "inner")
	if err := os.MkdirAll(inner, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(closed, 0o700)
	writeFile(t, filepath.Join(inner, "f"), "x")
	exe := filepath.Join(base, "probe")
	copyFile(t, testExe(t), exe, 0o755)
	sync := filepath.Join(base, "sync")
	if err := os.Mkdir(sync, 0o755); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(sync, "go")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	// The agent waits on the fifo, then reads inside the folder.
	spec := Spec{Restrict: true, RO: append(DefaultSystemRO(), exe, sync), RW: []string{inner},
		Argv: []string{"/bin/sh", "-c", "read x < " + fifo + "; exec " + exe + " probe read:" + filepath.Join(inner, "f")}}
	cred := &syscall.Credential{Uid: 65534, Gid: 65534}
	d, err := PrepareDirect(spec, nil, cred)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan run, 1)
	go func() {
		r, _, err := startDirect(d, append(os.Environ(), helperEnv+"=1"), cred)
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	// Opening the fifo returns once the agent runs (its rules made).
	w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(closed, 0o755)
	w.WriteString("go\n")
	w.Close()
	r := <-done
	expect(t, parseProbe(t, r)[0], false)
}

// TestDirectLeavesTheDaemonsOtherThreadsUnrestricted: after many direct
// starts (each restricting a thread of this process, with the signal
// scope), made while other goroutines write files and collect garbage, no
// thread of the process has no_new_privs, every goroutine still writes
// where the agents could not, and no restricted thread is left.
func TestDirectLeavesTheDaemonsOtherThreadsUnrestricted(t *testing.T) {
	requireLandlock(t)
	if ABI() < directScopeABI {
		t.Skipf("Landlock ABI %d: direct starts with the signal scope need %d", ABI(), directScopeABI)
	}
	dir := tempDir(t)
	spec := Spec{Restrict: true, ScopeSignals: true, RO: DefaultSystemRO(), OpenFiles: 32, Argv: []string{"/bin/true"}}
	stop := make(chan struct{})
	var busy sync.WaitGroup
	var writeErr error
	var mu sync.Mutex
	for w := range 4 {
		busy.Add(1)
		go func() {
			defer busy.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				p := filepath.Join(dir, "w"+strconv.Itoa(w)+"-"+strconv.Itoa(i%8))
				if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
					mu.Lock()
					writeErr = err
					mu.Unlock()
					return
				}
				if i%50 == 0 {
					runtime.GC()
				}
			}
		}()
	}
	var starts sync.WaitGroup
	errs := make(chan error, 200)
	for g := range 4 {
		starts.Add(1)
		go func() {
			defer starts.Done()
			for range 50 {
				d, err := PrepareDirect(spec, nil, nil)
				if err != nil {
					errs <- err
					return
				}
				r, ok, err := startDirect(d, nil, nil)
				if err != nil || !ok || r.code != 0 {
					errs <- errors.New("start " + strconv.Itoa(g) + ": " + strconv.FormatBool(ok) + " " + strconv.Itoa(r.code) + " " + r.stderr + " " + errString(err))
					return
				}
			}
		}()
	}
	starts.Wait()
	close(stop)
	busy.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if writeErr != nil {
		t.Fatalf("a goroutine of the daemon could not write: %v", writeErr)
	}
	// A start's thread ends once its goroutine returned, a moment after.
	var tasks []os.DirEntry
	var restricted []string
	for deadline := time.Now().Add(testTimeout); ; {
		var err error
		tasks, err = os.ReadDir("/proc/self/task")
		if err != nil {
			t.Fatal(err)
		}
		restricted = nil
		for _, task := range tasks {
			b, err := os.ReadFile("/proc/self/task/" + task.Name() + "/status")
			if err == nil && !strings.Contains(string(b), "NoNewPrivs:\t0") {
				restricted = append(restricted, task.Name())
			}
		}
		if len(restricted) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(restricted) > 0 {
		t.Errorf("threads %v of the daemon (pid %d) have no_new_privs set: restricted threads were left", restricted, os.Getpid())
	}
	if len(tasks) > 100 {
		t.Errorf("%d threads after 200 starts: the start threads were not ended", len(tasks))
	}
	// Goroutines on fresh threads write too.
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			if err := os.WriteFile(filepath.Join(dir, "t"+strconv.Itoa(i)), nil, 0o644); err != nil {
				t.Errorf("thread %d: %v", unix.Gettid(), err)
			}
		}()
	}
	wg.Wait()
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestDirectChildHoldingMoreThanStdioIsKilled: a fork that hands the
// child a descriptor beyond 0-2 (the supervisor never does) gets its child
// killed before its first instruction.
func TestDirectChildHoldingMoreThanStdioIsKilled(t *testing.T) {
	requireLandlock(t)
	// With /proc granted the start's thread checks; without, the
	// caller's goroutine does.
	for _, proc := range []bool{true, false} {
		t.Run("proc="+strconv.FormatBool(proc), func(t *testing.T) { childHoldingMoreThanStdio(t, proc) })
	}
}

func childHoldingMoreThanStdio(t *testing.T, proc bool) {
	marker := filepath.Join(tempDir(t), "ran")
	ro := DefaultSystemRO()
	if !proc {
		ro = slices.DeleteFunc(ro, func(p string) bool { return p == "/proc" })
	}
	d, err := PrepareDirect(Spec{Restrict: true, RO: ro, RW: []string{filepath.Dir(marker)},
		Argv: []string{"/usr/bin/touch", marker}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	devnull, _ := os.Open(os.DevNull)
	defer devnull.Close()
	fd := devnull.Fd()
	argv := d.Argv()
	attr := &syscall.ProcAttr{Files: []uintptr{fd, fd, fd, fd}, Sys: &syscall.SysProcAttr{Ptrace: true}}
	pid, err := d.Start(forkExec(argv, attr))
	if pid <= 0 || err == nil || !strings.Contains(err.Error(), "descriptor 3") {
		t.Fatalf("Start = %d, %v; want the child killed for holding descriptor 3", pid, err)
	}
	var ws syscall.WaitStatus
	syscall.Wait4(pid, &ws, 0, nil)
	if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Errorf("the child ended %v, want killed", ws)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the command ran")
	}
}

// TestPrepareDirectLeavesToTheShimWhatItCannotGive and a start that fails
// before its command runs leaves nothing behind.
func TestPrepareDirectLeavesToTheShimWhatItCannotGive(t *testing.T) {
	requireLandlock(t)
	base := Spec{Restrict: true, RO: DefaultSystemRO(), Argv: []string{"/bin/true"}}
	for name, change := range map[string]func(*Spec){
		"init":          func(s *Spec) { s.Init = true },
		"address space": func(s *Spec) { s.MemoryBytes = 1 << 30 },
		"PATH lookup":   func(s *Spec) { s.Argv = []string{"true"} },
		"walked view":   func(s *Spec) { s.All = true },
		"above the daemon's hard limit": func(s *Spec) {
			var l unix.Rlimit
			unix.Getrlimit(unix.RLIMIT_NOFILE, &l)
			s.OpenFiles = int64(l.Max + 1)
		},
	} {
		s := base
		change(&s)
		if _, err := PrepareDirect(s, nil, nil); !errors.Is(err, ErrNeedsShim) {
			t.Errorf("%s: PrepareDirect = %v, want ErrNeedsShim", name, err)
		}
	}
	// A granted path that became a link: refused on the start's thread,
	// before any fork (the shim then says so in the agent's log).
	dir := tempDir(t)
	os.Symlink("/etc", filepath.Join(dir, "link"))
	s := base
	s.RW = []string{filepath.Join(dir, "link")}
	d, err := PrepareDirect(s, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	forked := false
	pid, err := d.Start(nil, func([]int) (int, error) { forked = true; return 0, errors.New("unreachable") })
	if pid != 0 || !errors.Is(err, ErrNotStarted) || forked || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("Start = %d, %v (forked %v); want nothing started, for the link", pid, err, forked)
	}
}

func parseProbe(t *testing.T, r run) []probeResult {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("probe exited %d: %s", r.code, r.stderr)
	}
	var res []probeResult
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var pr probeResult
		if err := json.Unmarshal([]byte(line), &pr); err != nil {
			t.Fatalf("probe output %q: %v", r.stdout, err)
		}
		res = append(res, pr)
	}
	return res
}

func copyFile(t *testing.T, src, dst string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, mode); err != nil {
		t.Fatal(err)
	}
	os.Chmod(dst, mode)
}

// TestDirectAgentRunsOnlyOnceItsThreadEnded: the start's thread shares the
// agent's Landlock domain, so an agent of the daemon's uid (here root)
// could signal or trace it while it lives; the agent runs only once it
// has ended. The thread lingers after the detach (up to 1 s, or until the
// agent has probed): the agent reaches none of this process's threads
// with a null signal.
func TestDirectAgentRunsOnlyOnceItsThreadEnded(t *testing.T) {
	requireLandlock(t)
	if ABI() < directScopeABI {
		t.Skipf("Landlock ABI %d: direct starts with the signal scope need %d", ABI(), directScopeABI)
	}
	base := tempDir(t)
	exe := filepath.Join(base, "probe")
	copyFile(t, testExe(t), exe, 0o755)
	out := filepath.Join(base, "out")
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	probed := filepath.Join(out, "probed")
	spec := Spec{Restrict: true, RO: append(DefaultSystemRO(), exe), RW: append(DefaultSystemRW(), out), ScopeSignals: true,
		Argv: []string{exe, "probe", "threads0:" + strconv.Itoa(os.Getpid()), "write:" + probed}}
	directThreadLingers = func() {
		kintestWait(time.Second, func() bool { _, err := os.Stat(probed); return err == nil })
	}
	defer func() { directThreadLingers = nil }()
	r := directRun(t, spec, nil, nil)
	res := parseProbe(t, r)
	if !res[0].OK || res[0].N != 0 {
		t.Errorf("the agent reached %d of the daemon's threads with a signal (%+v): its start's thread was still alive", res[0].N, res[0])
	}
}

// kintestWait polls cond until it holds or limit passes.
func kintestWait(limit time.Duration, cond func() bool) {
	deadline := time.Now().Add(limit)
	for !cond() && time.Now().Before(deadline) {
		runtime.Gosched()
		time.Sleep(5 * time.Millisecond)
	}
}

// TestDirectStartForksFromATableOfItsOwn: a daemon holds two or so
// descriptors per live agent, and a fork copies its caller's table (and
// the child's execve closes every close-on-exec one of the copy): a start
// must not cost more with every agent alive. The start's thread holds only
// the daemon's first few descriptors and what the start carries, the
// runtime keeps working there (a garbage collection and a timer use its
// netpoller's descriptors from that thread), a descriptor the daemon left
// inheritable does not reach the agent, and the daemon's table is as it was.
func TestDirectStartForksFromATableOfItsOwn(t *testing.T) {
	requireLandlock(t)
	held := holdNull(t, 2000, 0) // not close-on-exec, on purpose
	before := countFDs(t, "/proc/self/fd")
	threadFDs, threadErr := -1, error(nil)
	directThreadLingers = func() {
		runtime.GC()
		tm := time.NewTimer(time.Millisecond)
		<-tm.C
		var names []os.DirEntry
		names, threadErr = os.ReadDir("/proc/thread-self/fd")
		threadFDs = len(names)
	}
	defer func() { directThreadLingers = nil }()
	r := directRun(t, Spec{Restrict: true, RO: DefaultSystemRO(), RW: DefaultSystemRW(),
		Argv: []string{"/bin/sh", "-c", "ls /proc/self/fd | wc -l"}}, nil, nil)
	if r.code != 0 {
		t.Fatalf("the agent exited %d: %s", r.code, r.stderr)
	}
	if threadErr != nil {
		t.Fatalf("the start's thread could not list its descriptors: %v", threadErr)
	}
	// The standard ones, the runtime's, the test binary's first few, and
	// the carried stdio: far below what the process holds.
	if threadFDs < 3 || threadFDs > 64 {
		t.Errorf("the start's thread held %d descriptors (the process %d); want its own table of a few", threadFDs, before)
	}
	// ls's own: 0, 1, 2 and the directory it lists.
	if got := strings.TrimSpace(r.stdout); got != "4" {
		t.Errorf("the agent listed %s descriptors, want 4 (0, 1, 2 and ls's own)", got)
	}
	for _, fd := range held[:10] {
		if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil || flags&unix.FD_CLOEXEC != 0 {
			t.Fatalf("the daemon's descriptor %d: flags %d, %v; want it open and as it was (inheritable)", fd, flags, err)
		}
	}
	if after := countFDs(t, "/proc/self/fd"); after > before+2 {
		t.Errorf("the process held %d descriptors before the start and %d after", before, after)
	}
}

func countFDs(t *testing.T, dir string) int {
	t.Helper()
	names, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return len(names)
}

// TestForkFromOwnTable: a shim's fork, like a direct start's, runs on a
// thread whose table holds the carried descriptors and the daemon's first
// few, not every descriptor the process holds; the runtime works there.
func TestForkFromOwnTable(t *testing.T) {
	forkFromOwnTableTest(t, onMainThread)
}

// TestForkFromOwnTableOffTheMainThread: a goroutine that lands on the main
// thread (it happened in CI: the fork then copied the whole shared table,
// since the main thread never ends and so never takes a table of its own)
// hands the start to another thread. The first locked goroutine is told it
// is on the main thread, whichever it is; the others get the true answer.
// (Told no there too, a goroutine that did land on the main thread took a
// table of its own there and wedged the thread with it: pidfd_getfd reads
// the main thread's table, so every later start of the test binary carried
// descriptors from that stale copy, or failed with EBADF.)
func TestForkFromOwnTableOffTheMainThread(t *testing.T) {
	var asked atomic.Int32
	forkFromOwnTableTest(t, func() bool { return asked.Add(1) == 1 || onMainThread() })
	if asked.Load() < 2 {
		t.Errorf("asked %d times whether on the main thread, want 2 or more (the start moved)", asked.Load())
	}
}

func forkFromOwnTableTest(t *testing.T, mainThread func() bool) {
	t.Helper()
	held := holdNull(t, 1000, unix.O_CLOEXEC)
	out, err := os.CreateTemp(tempDir(t), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	var threadFDs int
	pid, err := forkFromOwnTable([]int{held[len(held)-1], int(out.Fd()), int(out.Fd())}, func(fds []int) (int, error) {
		runtime.GC()
		tm := time.NewTimer(time.Millisecond)
		<-tm.C
		names, err := os.ReadDir("/proc/thread-self/fd")
		if err != nil {
			return 0, err
		}
		threadFDs = len(names)
		return syscall.ForkExec("/bin/sh", []string{"/bin/sh", "-c", "echo started; ls /proc/self/fd | wc -l"},
			&syscall.ProcAttr{Files: []uintptr{uintptr(fds[0]), uintptr(fds[1]), uintptr(fds[2])}})
	}, mainThread)
	if err != nil {
		t.Fatal(err)
	}
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(pid, &ws, 0, nil); err != nil || ws.ExitStatus() != 0 {
		t.Fatalf("the child: %v, %v", ws, err)
	}
	if threadFDs < 3 || threadFDs > 64 {
		t.Errorf("the fork's thread held %d descriptors (the process over 1,000); want its own table of a few", threadFDs)
	}
	b, _ := os.ReadFile(out.Name())
	if got := string(b); got != "started\n4\n" {
		t.Errorf("the child wrote %q, want it started with 0, 1, 2 only (and ls's own)", got)
	}
}

// holdNull opens /dev/null n times with flags besides O_RDONLY, as a
// daemon holds a few descriptors per live agent, until the test ends.
func holdNull(tb testing.TB, n, flags int) []int {
	tb.Helper()
	held := make([]int, 0, n)
	tb.Cleanup(func() {
		for _, fd := range held {
			unix.Close(fd)
		}
	})
	for range n {
		fd, err := unix.Open(os.DevNull, unix.O_RDONLY|flags, 0)
		if err != nil {
			tb.Fatalf("open: %v (RLIMIT_NOFILE too low for %d descriptors?)", err, n)
		}
		held = append(held, fd)
	}
	return held
}
