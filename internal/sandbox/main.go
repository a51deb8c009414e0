package sandbox

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Exit statuses of Main, as a shell's: the shim never returns otherwise.
const (
	ExitCannotRun = 126 // bad arguments, a refused path, Landlock or a limit failed, exec refused
	ExitNotFound  = 127 // the command was not found
)

// WarningUnrestricted is what Main prints (after "kin sandbox: ") when it
// runs an agent without Landlock because the operator allowed best effort.
const WarningUnrestricted = "WARNING: Landlock is unavailable; running agent UNRESTRICTED (best effort allowed by the operator)"

// Main is the shim: it parses the arguments Args produced, checks and
// opens the granted paths, restricts itself with Landlock (unless the spec
// says not to), sets the limits and execs the command, with the shim's
// environment. It never returns on success. On failure it prints one line
// on stderr, "kin sandbox: <what failed>: <why>", and returns 126, or 127
// when the command was not found; where the exec itself fails (the limits
// set), it exits with that status instead of returning, stderr being an
// *os.File's descriptor or else descriptor 2.
func Main(args []string, stderr io.Writer) int {
	spec, err := parseArgs(args)
	if err != nil {
		return fail(stderr, ExitCannotRun, err)
	}
	p, code, err := prepare(&spec, ABI(), stderr)
	if err != nil {
		return fail(stderr, code, err)
	}
	p.stderrFD = 2
	if f, ok := stderr.(*os.File); ok {
		p.stderrFD = int(f.Fd())
	}
	code, err = p.run()
	return fail(stderr, code, err)
}

// plan is a checked spec, ready to run.
type plan struct {
	path   string   // the command, looked up
	argv   []string // as given
	abi    int      // 0: no Landlock
	rules  []rule
	limits []limit
	// scopeSignals and init: Spec.ScopeSignals and Spec.Init.
	scopeSignals bool
	init         bool
	// view is Spec.ViewFD, checked; -1 without one.
	view int
	// stderrFD is where exec writes its failure (Main's stderr, or 2).
	stderrFD int
	// childSpec is what init's child shim applies when the spec has an
	// address-space limit (set in the child only: the init's own Go
	// runtime must be free to map memory).
	childSpec *Spec
}

// limit is one resource limit to set: soft = hard = value, unless soft
// is set.
type limit struct {
	name     string
	resource int
	value    uint64
	soft     uint64
}

// prepare decides whether to restrict, looks the command up and opens the
// granted paths: everything short of changing the process. The code goes
// with a non-nil error.
func prepare(spec *Spec, abi int, stderr io.Writer) (*plan, int, error) {
	p := &plan{argv: spec.Argv, scopeSignals: spec.ScopeSignals, init: spec.Init}
	if spec.Restrict {
		switch {
		case abi > 0:
			p.abi = abi
		case spec.BestEffort:
			fmt.Fprintf(stderr, "kin sandbox: %s\n", WarningUnrestricted)
		default:
			return nil, ExitCannotRun, errors.New("landlock: unavailable on this kernel (not built in, or not enabled at boot with lsm=...,landlock): " +
				"refusing to run the agent without its mounts enforced; the operator may allow best effort (best_effort) to run it unrestricted")
		}
	}
	path, err := exec.LookPath(spec.Argv[0])
	if err != nil {
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			if strings.Contains(spec.Argv[0], "/") {
				return nil, ExitNotFound, fmt.Errorf("command not found: %s: no such file", quote(spec.Argv[0]))
			}
			return nil, ExitNotFound, fmt.Errorf("command not found: %s is not in PATH (%s)", quote(spec.Argv[0]), quote(os.Getenv("PATH")))
		}
		return nil, ExitCannotRun, fmt.Errorf("command %s: %v", quote(spec.Argv[0]), unwrapExecError(err))
	}
	p.path = path
	for _, l := range specLimits(spec) {
		// An init keeps neither limit itself: RLIMIT_AS would starve the
		// Go runtime, and under RLIMIT_NPROC the init could not make the
		// thread it needs once its command's subtree took every task (the
		// command's tasks are still counted with the init's, so the
		// command gets the limit less the init's few threads).
		if spec.Init && (l.resource == syscall.RLIMIT_AS || l.resource == unix.RLIMIT_NPROC) {
			if p.childSpec == nil {
				p.childSpec = &Spec{Argv: spec.Argv}
			}
			p.childSpec.MemoryBytes, p.childSpec.Processes = spec.MemoryBytes, spec.Processes
			continue
		}
		p.limits = append(p.limits, l)
	}
	p.view = -1
	if spec.ViewFD != 0 {
		if err := checkView(spec.ViewFD); err != nil {
			closeHeld(spec)
			return nil, ExitCannotRun, err
		}
		if p.abi > 0 {
			p.view = spec.ViewFD
		} else {
			unix.Close(spec.ViewFD)
		}
	}
	if p.abi > 0 {
		p.rules, err = openRules(spec, handledAccess(p.abi))
		if err != nil {
			return nil, ExitCannotRun, err
		}
	} else {
		closeHeld(spec)
	}
	return p, 0, nil
}

// checkView checks that the descriptor Spec.ViewFD names is a Landlock
// ruleset, and keeps it from the agent (close-on-exec; restrict closes it).
func checkView(fd int) error {
	target, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return fmt.Errorf("view: descriptor %d that kin passed: %v", fd, err)
	}
	if target != "anon_inode:[landlock-ruleset]" {
		return fmt.Errorf("view: descriptor %d is %s, not a Landlock ruleset", fd, quote(target))
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC); err != nil {
		return fmt.Errorf("view: descriptor %d: close-on-exec: %v", fd, err)
	}
	return nil
}

// run restricts the calling thread, sets the limits and execs the command
// from that thread. It returns only on failure, with the exit status.
func (p *plan) run() (int, error) {
	// Landlock (before ABI 8) and no_new_privs apply to the calling
	// thread: stay on it until execve, which keeps only this thread. Never
	// unlocked: on failure the process exits.
	runtime.LockOSThread()
	if p.abi > 0 {
		err := restrictThread(p.abi, p.rules, p.scopeSignals, p.view)
		closeRules(p.rules)
		if err != nil {
			return ExitCannotRun, err
		}
	}
	env := os.Environ()
	// The agent gets stdin, stdout and stderr, nothing else the shim was
	// handed: the held grants are closed already, and the open kin binary
	// the supervisor started the shim from (Spec.Exe) must not follow.
	if err := closeOnExecFrom3(); err != nil {
		return ExitCannotRun, fmt.Errorf("close descriptors on exec: %v", err)
	}
	if p.init {
		// The init keeps neither RLIMIT_AS nor RLIMIT_NPROC (prepare): its
		// runtime may go on mapping memory and making threads.
		for _, l := range p.limits {
			r := l.rlimit()
			if err := syscall.Setrlimit(l.resource, &r); err != nil {
				return ExitCannotRun, fmt.Errorf("rlimit: %s=%d:%d: %v", l.name, r.Cur, r.Max, err)
			}
		}
		return p.runInit()
	}
	return p.exec(env)
}

// exec sets the limits and execs the command from the calling thread.
// Go's syscall.Exec allocates (the C strings of the arguments and the
// environment) and so may the runtime's other threads: under an RLIMIT_AS
// below what the shim has mapped already, any new mapping fails, and the
// shim would die with "fatal error: runtime: out of memory" instead of
// running the command. So everything the exec needs is made first, the
// collector is stopped, and only system calls run from the first limit to
// the exec (RLIMIT_AS last). Should the exec fail, its one line is written
// and the process exits from here, with raw system calls too, into a
// message made beforehand: it never returns once the limits are set.
//
// Unlike syscall.Exec, this does not hold the runtime's exec lock (Go
// offers no way to): should the runtime clone a thread while the execve
// runs, the kernel treats the exec as shared and the command runs without
// the privileges a set-user-id or file-capability binary would have given
// it (golang.org/issue/19546). That gives less, never more; the window is
// two system calls long, with nothing of the shim's own running beside.
func (p *plan) exec(env []string) (int, error) {
	if !p.setsOpenFiles() {
		restoreOpenFiles()
	}
	path, err := syscall.BytePtrFromString(p.path)
	if err != nil {
		return ExitCannotRun, fmt.Errorf("exec %s: %v", quote(p.path), err)
	}
	argv, err := syscall.SlicePtrFromStrings(p.argv)
	if err != nil {
		return ExitCannotRun, fmt.Errorf("exec %s: arguments: %v", quote(p.path), err)
	}
	envv, err := syscall.SlicePtrFromStrings(env)
	if err != nil {
		return ExitCannotRun, fmt.Errorf("exec %s: environment: %v", quote(p.path), err)
	}
	rlimits := make([]syscall.Rlimit, len(p.limits))
	for i, l := range p.limits {
		rlimits[i] = l.rlimit()
	}
	// fail's line, less the reason: "kin sandbox: exec <path>: ", with
	// room for the longest errno text and hint.
	head := "kin sandbox: " + oneLine(fmt.Sprintf("exec %s: ", quote(p.path)))
	msg := make([]byte, len(head), len(head)+256)
	copy(msg, head)
	// No collection starts from here: none is running once this returns,
	// and nothing allocates to set one off (nor the memory limit's).
	debug.SetGCPercent(-1)
	debug.SetMemoryLimit(math.MaxInt64)
	for i := range rlimits {
		_, _, e := syscall.RawSyscall6(syscall.SYS_PRLIMIT64, 0, uintptr(p.limits[i].resource), uintptr(unsafe.Pointer(&rlimits[i])), 0, 0, 0)
		if e != 0 { // RLIMIT_AS, last, is not set: this may allocate
			return ExitCannotRun, fmt.Errorf("rlimit: %s=%d:%d: %v", p.limits[i].name, rlimits[i].Cur, rlimits[i].Max, e)
		}
	}
	_, _, e := syscall.RawSyscall(syscall.SYS_EXECVE, uintptr(unsafe.Pointer(path)), uintptr(unsafe.Pointer(&argv[0])), uintptr(unsafe.Pointer(&envv[0])))
	code, hint := execFailed(e, p.abi > 0)
	msg = append(msg, e.Error()...) // a text of the table for every errno execve returns: no allocation
	msg = append(msg, hint...)
	msg = append(msg, '\n')
	syscall.RawSyscall(syscall.SYS_WRITE, uintptr(p.stderrFD), uintptr(unsafe.Pointer(&msg[0])), uintptr(len(msg)))
	syscall.RawSyscall(syscall.SYS_EXIT_GROUP, uintptr(code), 0, 0)
	panic("unreachable: exit_group returned")
}

// execFailed is the exit status and the hint for an execve that failed
// with e: constants, so that it allocates nothing.
func execFailed(e syscall.Errno, landlock bool) (int, string) {
	switch {
	case e == syscall.ENOENT:
		return ExitNotFound, " (a script's interpreter may be missing)"
	case e == syscall.EACCES && landlock:
		return ExitCannotRun, " (Landlock: are the command and its interpreter under a granted path?)"
	}
	return ExitCannotRun, ""
}

// setsOpenFiles says whether the plan sets RLIMIT_NOFILE itself.
func (p *plan) setsOpenFiles() bool {
	for _, l := range p.limits {
		if l.resource == syscall.RLIMIT_NOFILE {
			return true
		}
	}
	return false
}

// restoreOpenFiles gives the process back the soft RLIMIT_NOFILE it was
// started with. Go's runtime raises it at start and restores it only in
// what the process execs or starts, a value it keeps to itself: an exec
// that cannot start anything (an empty path: ENOENT) restores it and
// changes nothing else. TestCommandGetsTheOpenFilesLimitTheShimStartedWith
// fails if Go's runtime stops doing so.
func restoreOpenFiles() {
	_ = syscall.Exec("", nil, nil)
}

// rlimit is l as the kernel takes it (the shim's and a direct start's).
func (l limit) rlimit() syscall.Rlimit {
	soft := l.value
	if l.soft != 0 {
		soft = l.soft
	}
	return syscall.Rlimit{Cur: soft, Max: l.value}
}

// closeOnExecFrom3 marks every descriptor from 3 up close-on-exec:
// close_range where the kernel has it (5.11), else each in /proc/self/fd.
func closeOnExecFrom3() error {
	err := unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC)
	if !errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.EINVAL) {
		return err
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return err
	}
	for _, e := range ents {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			syscall.CloseOnExec(fd)
		}
	}
	return nil
}

// unwrapExecError drops exec.Error's own prefix ("exec: "name": ").
func unwrapExecError(err error) error {
	var ee *exec.Error
	if errors.As(err, &ee) {
		return ee.Err
	}
	return err
}

// fail prints err as Main's one line and returns code.
func fail(stderr io.Writer, code int, err error) int {
	fmt.Fprintf(stderr, "kin sandbox: %s\n", oneLine(err.Error()))
	return code
}
