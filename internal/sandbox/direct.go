package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A direct start gives an agent what the shim gives it, without the
// shim's exec and Go runtime start (issue 22: about 1 ms of every spawn's
// latency and a fifth of the machine's CPU in a burst of spawns). The
// daemon restricts one of its own OS threads and forks the agent from it:
//
//   - a goroutine locks its OS thread and never unlocks it, so that when it
//     returns the Go runtime ends the thread: no other goroutine ever runs
//     on a restricted thread (and the runtime makes new threads from its
//     template thread while one is locked, never by cloning this one);
//   - on that thread only: the grants are opened as the agent's user (the
//     thread's own fsuid, fsgid and groups, as the shim opened them as the
//     agent), then the daemon's credentials are put back on the thread;
//     prctl(PR_SET_NO_NEW_PRIVS) and landlock_restrict_self (Landlock and
//     no_new_privs are per thread before ABI 8's TSYNC, and a clone
//     inherits the calling thread's); the fork and exec, with the child
//     traced (SysProcAttr.Ptrace);
//   - rlimits are per process and must hold from the command's first
//     instruction: the traced child stops with SIGTRAP right after its
//     execve, before any instruction of the new image runs; the limits are
//     set then (prlimit), its descriptors are checked (0, 1 and 2 only, as
//     the shim leaves it), and the thread detaches it into a stop
//     (SIGSTOP): until the thread has ended the child shares its domain,
//     so the signal scope and ptrace's Landlock check would not keep an
//     agent of the daemon's uid (or root) from it; the caller continues
//     the child (SIGCONT) once the thread's pidfd says it has ended.
//
// What needs the shim still gets it (PrepareDirect says why): an init
// (Spec.Init), an address-space limit (RLIMIT_AS must hold at the execve
// itself, which the shim sets before it), Landlock missing, the All view
// without the daemon's ruleset (the shim walks it as the agent), a command
// without a slash (the shim looks it up in the agent's PATH as the agent),
// a limit above the daemon's own hard limit (raising it is the agent's
// privilege, not the daemon's), credentials a daemon that is not root
// cannot take on a thread. Any failure before the child runs (a refused
// path, a failed restriction or exec) leaves the start to the shim, which
// reports it in the agent's log as it always did.

// ErrNeedsShim wraps PrepareDirect's reasons for leaving a start to the
// shim.
var ErrNeedsShim = errors.New("sandbox: this start needs the shim")

// directScopeABI is the least Landlock ABI with which a thread of the
// daemon may restrict itself with LANDLOCK_SCOPE_SIGNAL: the Go runtime
// signals its own threads (preemption, stopping the world) from whichever
// thread it runs on, and only since Linux 6.15 (ABI 7) does Landlock let
// the threads of one process signal each other whatever their domains.
const directScopeABI = 7

// Direct is a Spec prepared for a start without the shim (see above).
// Start uses it once; Close releases what it holds when Start never ran.
type Direct struct {
	spec   Spec // with Held and ViewFD this process's own (duplicated) descriptors
	abi    int
	limits []limit
	cred   *syscall.Credential // whose fsuid, fsgid, groups open the grants; nil: the daemon's own
	used   bool
}

// PrepareDirect prepares spec for a start without the shim. files are the
// descriptors the shim would inherit as 3, 4, ... (Spec.Held's and
// Spec.ViewFD's numbers); PrepareDirect duplicates those it needs. cred is
// the agent's (supervisor's Spec.Credential), nil where it runs as the
// daemon. An error wrapping ErrNeedsShim says why the start needs the
// shim; any other error is the spec's (the shim would refuse it too).
func PrepareDirect(spec Spec, files []*os.File, cred *syscall.Credential) (*Direct, error) {
	if err := spec.validate(); err != nil {
		return nil, err
	}
	abi := ABI()
	need := func(why string) (*Direct, error) { return nil, fmt.Errorf("%w: %s", ErrNeedsShim, why) }
	switch {
	case spec.Init:
		return need("the init of a PID namespace is the shim itself")
	case spec.MemoryBytes != 0:
		return need("RLIMIT_AS must hold at the exec itself")
	case spec.Restrict && abi == 0:
		return need("no Landlock")
	case spec.Restrict && spec.ScopeSignals && abi >= 6 && abi < directScopeABI:
		return need(fmt.Sprintf("Landlock ABI %d scopes signals between the daemon's own threads", abi))
	case spec.All && spec.ViewFD == 0:
		return need("the All view without the daemon's ruleset (the shim walks it as the agent)")
	case !strings.Contains(spec.Argv[0], "/"):
		return need("the command is looked up in the agent's PATH")
	case cred != nil && os.Geteuid() != 0 && (int(cred.Uid) != os.Geteuid() || int(cred.Gid) != os.Getegid() || len(cred.Groups) > 0):
		return need("a daemon that is not root cannot take on the agent's credentials on a thread")
	}
	d := &Direct{spec: spec, abi: abi, cred: cred}
	if !spec.Restrict {
		d.abi = 0
	}
	d.limits = specLimits(&spec)
	for _, l := range d.limits {
		var cur unix.Rlimit
		if err := unix.Getrlimit(l.resource, &cur); err != nil || l.value > cur.Max {
			return need(fmt.Sprintf("%s %d is above the daemon's hard limit", l.name, l.value))
		}
	}
	// The descriptors become this process's own duplicates, which Start
	// (or Close) closes.
	fileFD := func(n int) (int, error) {
		i := n - 3
		if i < 0 || i >= len(files) || files[i] == nil {
			return -1, fmt.Errorf("sandbox: descriptor %d of the spec has no file", n)
		}
		fd, err := unix.FcntlInt(files[i].Fd(), unix.F_DUPFD_CLOEXEC, 3)
		if err != nil {
			return -1, fmt.Errorf("sandbox: duplicate descriptor %d: %w", n, err)
		}
		return fd, nil
	}
	d.spec.Held = slices.Clone(spec.Held)
	d.spec.ViewFD = 0
	for i := range d.spec.Held {
		d.spec.Held[i].FD = -1
	}
	for i, h := range spec.Held {
		fd, err := fileFD(h.FD)
		if err != nil {
			d.Close()
			return nil, err
		}
		d.spec.Held[i].FD = fd
	}
	if spec.ViewFD != 0 {
		fd, err := fileFD(spec.ViewFD)
		if err != nil {
			d.Close()
			return nil, err
		}
		d.spec.ViewFD = fd
		if err := checkView(fd); err != nil {
			d.Close()
			return nil, err
		}
	}
	if d.abi == 0 {
		closeHeld(&d.spec) // no rules: nothing uses them
		d.spec.Held = nil
		if d.spec.ViewFD > 0 {
			unix.Close(d.spec.ViewFD)
			d.spec.ViewFD = 0
		}
	}
	return d, nil
}

// specLimits are the limits spec sets, InheritOpenFiles' first and RLIMIT_AS
// last, for the shim (which keeps an init's RLIMIT_AS and RLIMIT_NPROC for
// its child) and a direct start alike.
func specLimits(spec *Spec) []limit {
	var out []limit
	for _, l := range []limit{
		{"RLIMIT_CPU", syscall.RLIMIT_CPU, uint64(spec.CPUSeconds), 0},
		{"RLIMIT_NOFILE", syscall.RLIMIT_NOFILE, uint64(spec.OpenFiles), 0},
		{"RLIMIT_NPROC", unix.RLIMIT_NPROC, uint64(spec.Processes), 0},
		{"RLIMIT_AS", syscall.RLIMIT_AS, uint64(spec.MemoryBytes), 0}, // last: the shim sets it right before exec (run)
	} {
		if l.value != 0 {
			out = append(out, l)
		}
	}
	if l := spec.InheritOpenFiles; l != nil && spec.OpenFiles == 0 {
		out = append([]limit{{"RLIMIT_NOFILE", syscall.RLIMIT_NOFILE, l.Hard, l.Soft}}, out...)
	}
	return out
}

// Argv is the command to start: Spec.Argv.
func (d *Direct) Argv() []string { return d.spec.Argv }

// Close releases the descriptors d holds, unless Start took them.
func (d *Direct) Close() {
	if d == nil || d.used {
		return
	}
	d.used = true
	d.closeFDs()
}

func (d *Direct) closeFDs() {
	for _, fd := range d.fds() {
		unix.Close(fd)
	}
}

// fds are the descriptors d holds: the held grants' and the view's.
func (d *Direct) fds() []int {
	var fds []int
	for _, h := range d.spec.Held {
		if h.FD > 0 {
			fds = append(fds, h.FD)
		}
	}
	if d.spec.ViewFD > 0 {
		fds = append(fds, d.spec.ViewFD)
	}
	return fds
}

// ownTable runs on the start's thread: it gives the thread a descriptor
// table of its own (privateTable) holding carry and d's descriptors (mine:
// d.fds()), which it renumbers, and marks every descriptor the thread
// holds from 3 up close-on-exec. It returns carry's numbers on the thread. own: the
// thread's table is its own (d's descriptors of the shared table are the
// caller's to close), even with an error.
//
// Every descriptor of the daemon that is not close-on-exec (opened by code
// that forgot it: go-fuse opens /dev/fuse so) would reach the agent, which
// the shim prevented by marking them all in itself. Go never relies on
// inheriting one (os/exec duplicates ExtraFiles in the child), so where
// the thread shares the daemon's table the daemon marks its own; the stop
// checks what the child holds all the same (another thread may open one
// meanwhile).
func (d *Direct) ownTable(carry, mine []int) (fds []int, own bool, err error) {
	all, own, err := privateTable(append(slices.Clone(carry), mine...))
	if err != nil {
		return nil, own, fmt.Errorf("sandbox: the start's descriptor table: %w", err)
	}
	if !own {
		if err := closeOnExecFrom3(); err != nil {
			return nil, false, fmt.Errorf("sandbox: mark the daemon's descriptors close-on-exec: %w", err)
		}
		return carry, false, nil
	}
	renumber := make(map[int]int, len(mine))
	for i, fd := range mine {
		renumber[fd] = all[len(carry)+i]
	}
	for i, h := range d.spec.Held {
		if h.FD > 0 {
			d.spec.Held[i].FD = renumber[h.FD]
		}
	}
	if d.spec.ViewFD > 0 {
		d.spec.ViewFD = renumber[d.spec.ViewFD]
	}
	return all[:len(carry)], true, nil
}

// ErrNotStarted wraps Start's errors when no process was left behind.
var ErrNotStarted = errors.New("sandbox: not started directly")

// directStuck is how long Start waits for the child's first stop before
// it kills the child: a signal that reaches it between its PTRACE_TRACEME
// and its execve stops it there, while the thread that must answer the
// stop still waits, in the fork, for the exec.
var directStuck = 30 * time.Second

// Start starts the process on a new OS thread restricted with d's domain:
// fork must start exactly one child, traced (syscall.SysProcAttr.Ptrace),
// with descriptors 0, 1 and 2 only, and return its pid. Start returns
// once the child runs its command with d's limits, or failed:
//
//   - an error wrapping ErrNotStarted: no process was left (the caller may
//     start it through the shim instead, which reports the failure in its
//     own words);
//   - a pid with a nil error: the child runs (or was killed before its
//     first instruction, which its wait status tells);
//   - a pid with another error: the child was killed before its first
//     instruction and must be reaped by the caller.
//
// The thread checks the stopped child's descriptors where its domain lets
// it read /proc, else the caller's goroutine (not restricted) does.
//
// fork runs on the start's thread, which has a descriptor table of its
// own where it can (fdtable.go): carry lists the caller's descriptors fork
// uses (the child's stdio, its cgroup), and fork gets their numbers on the
// thread, in order. fork may use no other descriptor of the caller's, and
// leave none to it (no SysProcAttr.PidFD: ForkFromOwnTable).
func (d *Direct) Start(carry []int, fork func(fds []int) (int, error)) (int, error) {
	if d.used {
		return 0, fmt.Errorf("%w: sandbox: a Direct starts once", ErrNotStarted)
	}
	d.used = true
	// The descriptors d holds, as numbers in the shared table: the thread
	// renumbers d's own where it takes a table of its own, and these are
	// then the caller's to close.
	shared := d.fds()
	type stop struct {
		pid  int
		died bool // before its first instruction (killed): nothing to set
		ask  bool // the thread may not read /proc: the caller checks the descriptors
		err  error
	}
	type thread struct {
		tid, pidfd int  // pidfd: the thread's own (PIDFD_THREAD) in the shared table, or -1
		own        bool // the thread's table is its own: shared is the caller's to close
		err        error
	}
	tids := make(chan thread, 1)
	stopped := make(chan stop, 2)
	verdict := make(chan error, 1)
	onThread := func() {
		// Locked by the caller, never unlocked: the thread ends with
		// this goroutine.
		tid := unix.Gettid()
		// Opened in the shared table, for the caller.
		pidfd, err := unix.PidfdOpen(tid, unix.PIDFD_THREAD)
		if err != nil {
			tids <- thread{tid: tid, pidfd: -1, err: fmt.Errorf("sandbox: pidfd of the start's thread: %w", err)}
			return
		}
		fds, own, err := d.ownTable(carry, shared)
		if err != nil {
			// pidfd is the shared table's: the caller closes it.
			tids <- thread{tid: tid, pidfd: pidfd, own: own, err: err}
			return
		}
		tids <- thread{tid: tid, pidfd: pidfd, own: own}
		pid, died, err := d.forkRestricted(func() (int, error) { return fork(fds) })
		if pid <= 0 || died || err != nil {
			stopped <- stop{pid: pid, died: died, err: err}
			return
		}
		// Checked here where the domain lets the thread read /proc (the
		// default view and the system paths do), else by the caller.
		err = d.atFirstInstruction(pid)
		if errors.Is(err, fs.ErrPermission) {
			stopped <- stop{pid: pid, ask: true}
			err = <-verdict
		}
		if err == nil {
			err = d.setLimits(pid)
		}
		if err == nil {
			// Detached into a stop (SIGSTOP delivered as it resumes,
			// before any instruction of its own): until this thread has
			// ended, the child shares its Landlock domain, so the scope
			// and ptrace checks would not keep an agent of the daemon's
			// uid (or root) from signalling or tracing it. The caller
			// continues the child once the thread is gone.
			if _, _, e := unix.RawSyscall6(unix.SYS_PTRACE, unix.PTRACE_DETACH, uintptr(pid), 0, uintptr(unix.SIGSTOP), 0, 0); e != 0 && e != unix.ESRCH {
				// ESRCH: it was killed meanwhile (its status says so).
				err = fmt.Errorf("sandbox: detach %d: %v", pid, e)
			}
		}
		if err != nil {
			unix.Kill(pid, unix.SIGKILL)
		}
		stopped <- stop{pid: pid, err: err}
		if directThreadLingers != nil {
			directThreadLingers()
		}
	}
	go func() {
		runtime.LockOSThread()
		if unix.Gettid() != os.Getpid() {
			onThread()
			return
		}
		// The main thread is never ended (the runtime parks it for good
		// instead): it stays as it is, held locked to this goroutine
		// until another goroutine locked another thread.
		locked := make(chan struct{})
		go func() {
			runtime.LockOSThread()
			close(locked)
			onThread()
		}()
		<-locked
		runtime.UnlockOSThread()
	}()
	th := <-tids
	if th.own || th.err != nil {
		// The thread works on its own copies (or never started): the
		// shared table's are closed here.
		for _, fd := range shared {
			unix.Close(fd)
		}
	}
	if th.pidfd >= 0 {
		defer unix.Close(th.pidfd)
	}
	if th.err != nil {
		return 0, fmt.Errorf("%w: %w", ErrNotStarted, th.err)
	}
	watchdog := time.AfterFunc(directStuck, func() { killTracedChildOf(th.tid) })
	s := <-stopped
	watchdog.Stop()
	if s.ask {
		verdict <- d.atFirstInstruction(s.pid)
		s = <-stopped
	}
	if s.pid <= 0 {
		return 0, fmt.Errorf("%w: %w", ErrNotStarted, s.err)
	}
	if s.err != nil {
		return s.pid, s.err
	}
	// The child waits in its stop until the restricted thread has ended
	// (its pidfd readable), then runs.
	if err := awaitExit(th.pidfd, directStuck); err != nil {
		unix.Kill(s.pid, unix.SIGKILL)
		return s.pid, fmt.Errorf("sandbox: the start's thread did not end: %w", err)
	}
	if err := unix.Kill(s.pid, unix.SIGCONT); err != nil && err != unix.ESRCH {
		unix.Kill(s.pid, unix.SIGKILL)
		return s.pid, fmt.Errorf("sandbox: continue %d: %w", s.pid, err)
	}
	return s.pid, nil
}

// directThreadLingers, set by a test, runs on the start's thread after
// the child was detached, just before the thread ends.
var directThreadLingers func()

// awaitExit waits until the thread or process of pidfd has exited.
func awaitExit(pidfd int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return os.ErrDeadlineExceeded
		}
		p := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
		n, err := unix.Poll(p, int(left.Milliseconds())+1)
		switch {
		case err == unix.EINTR:
		case err != nil:
			return err
		case n > 0:
			return nil
		}
	}
}

// forkRestricted runs on the locked thread: it opens the grants as the
// agent, restricts the thread, forks, and waits for the child's first
// stop. It returns pid 0 when no child was left.
func (d *Direct) forkRestricted(fork func() (int, error)) (pid int, died bool, err error) {
	if d.abi > 0 {
		rules, err := d.openRulesAs()
		if err != nil {
			d.closeFDs()
			return 0, false, err
		}
		// restrictThread closes the ruleset (the view's included).
		base := -1
		if d.spec.ViewFD > 0 {
			base = d.spec.ViewFD
		}
		err = restrictThread(d.abi, rules, d.spec.ScopeSignals, base)
		closeRules(rules) // the held grants' descriptors among them
		if err != nil {
			return 0, false, err
		}
	}
	pid, err = fork()
	if err != nil || pid <= 0 {
		return 0, false, err
	}
	for {
		var si ChildInfo
		err := WaitChild(unix.P_PID, pid, &si, unix.WEXITED|unix.WSTOPPED|unix.WNOWAIT, nil)
		if err != nil {
			unix.Kill(pid, unix.SIGKILL)
			return pid, false, fmt.Errorf("sandbox: wait for %d's first stop: %v", pid, err)
		}
		switch si.Code {
		case ChildTrapped:
			if syscall.Signal(si.Status) == syscall.SIGTRAP {
				return pid, false, nil // its execve's trap: no instruction of it ran
			}
			// Another signal reached it first (nothing kin sends before
			// Start returns): kill it rather than run it unlimited.
			unix.Kill(pid, unix.SIGKILL)
			return pid, false, fmt.Errorf("sandbox: %v reached process %d before its first instruction", syscall.Signal(si.Status), pid)
		case ChildExited, ChildKilled, ChildDumped:
			return pid, true, nil
		}
	}
}

// openRulesAs opens the grants as the shim did: as the agent's user, with
// its groups (fsuid, fsgid and groups of this thread alone), then puts the
// daemon's back.
func (d *Direct) openRulesAs() ([]rule, error) {
	handled := handledAccess(d.abi)
	c := d.cred
	if c == nil || os.Geteuid() != 0 {
		return openRules(&d.spec, handled)
	}
	groups, err := unix.Getgroups()
	if err != nil {
		return nil, fmt.Errorf("sandbox: groups: %v", err)
	}
	// The child takes the credential's groups (none where it lists
	// none), unless told to keep the daemon's (NoSetGroups).
	if !c.NoSetGroups {
		agentGroups := make([]uint32, 0, len(c.Groups))
		agentGroups = append(agentGroups, c.Groups...)
		if err := setThreadGroups(agentGroups); err != nil {
			return nil, err
		}
	}
	// Raw system calls: they change this thread only (syscall.Setfsuid
	// and friends would change every thread of the daemon).
	unix.RawSyscall(unix.SYS_SETFSGID, uintptr(c.Gid), 0, 0)
	unix.RawSyscall(unix.SYS_SETFSUID, uintptr(c.Uid), 0, 0)
	rules, oerr := openRules(&d.spec, handled)
	unix.RawSyscall(unix.SYS_SETFSUID, uintptr(os.Geteuid()), 0, 0)
	unix.RawSyscall(unix.SYS_SETFSGID, uintptr(os.Getegid()), 0, 0)
	daemonGroups := make([]uint32, len(groups))
	for i, g := range groups {
		daemonGroups[i] = uint32(g)
	}
	// The held grants' rules come last: their descriptors stay the
	// caller's to close on an error (as openRules leaves them).
	paths := rules[:len(rules)-min(len(rules), len(d.spec.Held))]
	if oerr == nil && !c.NoSetGroups {
		if err := setThreadGroups(daemonGroups); err != nil {
			closeRules(paths)
			return nil, err
		}
	}
	if fsuid, _, _ := unix.RawSyscall(unix.SYS_SETFSUID, ^uintptr(0), 0, 0); oerr == nil && int(fsuid) != os.Geteuid() {
		closeRules(paths)
		return nil, fmt.Errorf("sandbox: the thread's fsuid is %d, not the daemon's %d", fsuid, os.Geteuid())
	}
	return rules, oerr
}

// setThreadGroups sets the calling thread's supplementary groups only.
func setThreadGroups(gids []uint32) error {
	var p unsafe.Pointer
	if len(gids) > 0 {
		p = unsafe.Pointer(&gids[0])
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(gids)), uintptr(p), 0); e != 0 {
		return fmt.Errorf("sandbox: setgroups on the start's thread: %v", e)
	}
	runtime.KeepAlive(gids)
	return nil
}

// atFirstInstruction checks that the stopped child holds descriptors 0,
// 1 and 2 only.
func (d *Direct) atFirstInstruction(pid int) error {
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sandbox: %w", err)
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return fmt.Errorf("sandbox: %s: %v", dir, err)
	}
	for _, n := range names {
		if n != "0" && n != "1" && n != "2" {
			target, _ := os.Readlink(dir + "/" + n)
			return fmt.Errorf("sandbox: process %d would hold the daemon's descriptor %s (%s): killed before its first instruction", pid, n, quote(target))
		}
	}
	return nil
}

// setLimits sets the stopped child's limits, from the locked thread.
// prlimit on another process needs CAP_SYS_RESOURCE, which a root daemon
// may lack (a container's root often does), or the caller's real uid and
// gid to be the target's: this thread takes the agent's as its real ids
// for the calls (its effective ids stay the daemon's, so it may take its
// own back), then takes its own back, so that it is not counted among the
// agent's tasks (RLIMIT_NPROC) while it detaches.
func (d *Direct) setLimits(pid int) error {
	if len(d.limits) == 0 {
		return nil
	}
	c := d.cred
	switchIDs := c != nil && os.Geteuid() == 0 && (int(c.Uid) != os.Getuid() || int(c.Gid) != os.Getgid())
	if switchIDs {
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(c.Gid), ^uintptr(0), ^uintptr(0)); e != 0 {
			return fmt.Errorf("sandbox: take gid %d on the start's thread: %v", c.Gid, e)
		}
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(c.Uid), ^uintptr(0), ^uintptr(0)); e != 0 {
			unix.RawSyscall(unix.SYS_SETRESGID, uintptr(os.Getgid()), ^uintptr(0), ^uintptr(0))
			return fmt.Errorf("sandbox: take uid %d on the start's thread: %v", c.Uid, e)
		}
	}
	var err error
	for _, l := range d.limits {
		r := l.rlimit()
		if e := unix.Prlimit(pid, l.resource, (*unix.Rlimit)(&r), nil); e != nil {
			err = fmt.Errorf("sandbox: rlimit: %s=%d:%d of process %d: %v", l.name, r.Cur, r.Max, pid, e)
			break
		}
	}
	if switchIDs {
		_, _, e1 := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(os.Getuid()), ^uintptr(0), ^uintptr(0))
		_, _, e2 := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(os.Getgid()), ^uintptr(0), ^uintptr(0))
		if (e1 != 0 || e2 != 0) && err == nil {
			err = fmt.Errorf("sandbox: take the daemon's ids back on the start's thread: %v %v", e1, e2)
		}
	}
	return err
}

// killTracedChildOf kills the child thread tid traces: a child stopped before
// its execve, which the thread waits for in the fork.
func killTracedChildOf(tid int) {
	b, err := os.ReadFile("/proc/self/task/" + strconv.Itoa(tid) + "/children")
	if err != nil {
		return
	}
	// The thread is not new: it may have forked agents before it was
	// locked (os/exec, shim starts). Only the child it traces is this
	// start's.
	want := "\nTracerPid:\t" + strconv.Itoa(tid) + "\n"
	for _, f := range strings.Fields(string(b)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			continue
		}
		if st, err := os.ReadFile("/proc/" + f + "/status"); err == nil && strings.Contains(string(st), want) {
			unix.Kill(pid, unix.SIGKILL)
		}
	}
}

// ChildInfo is siginfo_t as waitid fills it for SIGCHLD on 64-bit Linux
// (Go's internal/syscall/unix.SiginfoChild; errno and code swap on MIPS,
// which kin does not target): x/sys/unix.Siginfo hides the pid and status.
// The supervisor reaps with it too (WaitChild).
type ChildInfo struct {
	Signo  int32
	Errno  int32
	Code   int32
	_      int32
	Pid    int32
	UID    uint32
	Status int32
	_      [100]byte
}

var _ [0]struct{} = [unsafe.Sizeof(ChildInfo{}) - unsafe.Sizeof(unix.Siginfo{})]struct{}{}

// ChildInfo.Code's values (si_code for SIGCHLD).
const (
	ChildExited = 1
	ChildKilled = 2
	ChildDumped = 3
	// ChildTrapped is a traced child's stop, which waitid reports to the
	// tracer's whole process even without WSTOPPED.
	ChildTrapped = 4
)

// WaitChild is waitid(2), retrying EINTR.
func WaitChild(idtype, id int, si *ChildInfo, options int, ru *unix.Rusage) error {
	for {
		*si = ChildInfo{}
		err := unix.Waitid(idtype, id, (*unix.Siginfo)(unsafe.Pointer(si)), options, ru)
		if err != unix.EINTR {
			return err
		}
	}
}
