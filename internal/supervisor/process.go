package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kin-agents/kin/internal/sandbox"
	"github.com/kin-agents/kin/internal/supervisor/cgroup"
	"github.com/kin-agents/kin/kin"
)

// Spec says what to run for an agent.
type Spec struct {
	ID kin.AgentID
	// ParentID nests the agent's group under its parent's, so that stopping
	// the parent stops it too. 0 (or Detached) puts it at the kin root. A
	// parent the supervisor does not know yet gets an empty group at the
	// root, in which its children nest.
	ParentID kin.AgentID
	// Detached puts the group at the kin root whatever ParentID says (seed
	// 001: detached children outlive their parent).
	Detached bool
	// Argv[0] is looked up in the daemon's PATH when it has no slash.
	Argv []string
	// Env is the complete environment; nil means an empty one (agents never
	// inherit the daemon's secrets by accident).
	Env []string
	// Dir is the working directory; "" keeps the daemon's.
	Dir string
	// Stdout and Stderr receive the output; nil discards it. An *os.File is
	// handed to the process as is; any other writer is fed from a pipe by a
	// goroutine until every writer of that pipe (the agent and whatever it
	// forked) has exited.
	Stdout, Stderr io.Writer
	// LogPath, when set, overrides Stdout and Stderr: both are appended to
	// this file (created 0600).
	LogPath string
	// ExtraFiles become file descriptors 3, 4, ... of the process.
	ExtraFiles []*os.File
	// Credential, when set, runs the process as that uid and gid (with no
	// supplementary groups unless given): agents must not run as root.
	Credential *syscall.Credential
	// Limits bound the agent's group, its whole subtree, with the
	// controllers enabled down kin's tree (Controllers); the ones that are
	// not are left unset (cgroup containment only).
	Limits cgroup.Limits
	// Direct, when set, starts the agent without the sandbox shim that
	// Argv runs (sandbox.Direct), where the supervisor can: with cgroup2
	// containment, without user or PID namespaces. Its process gets
	// descriptors 0, 1 and 2 only (ExtraFiles are the shim's). Where it
	// cannot, or the direct start fails before the command ran, Argv
	// starts as before. Start closes it.
	Direct Direct
}

// Direct is a start without the shim (sandbox.Direct): Start calls fork
// on an OS thread it restricted and returns once the child runs with its
// limits. fork must start the child traced (SysProcAttr.Ptrace) and
// return its pid, claimed. A pid of 0 with an error: nothing was left, and
// the shim may start the agent instead; a pid with an error: the child was
// killed before its first instruction and must be reaped. fork runs on
// that thread, which may have a descriptor table of its own: carry lists
// the descriptors fork uses, and fork gets their numbers there, in order.
type Direct interface {
	Argv() []string
	Start(carry []int, fork func(fds []int) (int, error)) (int, error)
	Close()
}

// EnvMarker is the variable the process-groups fallback adds to every
// agent's environment ("<supervisor name>/<agent id>") to find processes
// that left the agent's process group.
const EnvMarker = "KIN_SUPERVISOR_AGENT"

// Exit is how a process ended.
type Exit struct {
	ID  kin.AgentID
	Pid int
	// Code is the exit status, or -1 when a signal killed the process.
	Code int
	// Signal is the signal that killed the process, or 0.
	Signal     syscall.Signal
	CoreDumped bool
	Started    time.Time
	Ended      time.Time
	UserTime   time.Duration
	SystemTime time.Duration
	// Err is set when no status could be collected: ErrClosed when the
	// supervisor was closed leaving the process running.
	Err error
}

// Success reports a zero exit status.
func (e Exit) Success() bool { return e.Err == nil && e.Code == 0 && e.Signal == 0 }

func (e Exit) String() string {
	switch {
	case e.Err != nil:
		return "unknown: " + e.Err.Error()
	case e.Signal != 0:
		s := "signal: " + e.Signal.String()
		if e.CoreDumped {
			s += " (core dumped)"
		}
		return s
	}
	return fmt.Sprintf("exit status %d", e.Code)
}

// Process is one started agent process.
type Process struct {
	ID  kin.AgentID
	Pid int
	// Cgroup is the agent's group, in which its children's groups nest
	// ("" with process groups); SelfCgroup is the leaf the process runs in.
	Cgroup  string
	Started time.Time

	sup    *Supervisor
	status *os.File      // with PID namespaces: the init's status pipe
	done   chan struct{} // closed once exit is set
	// exit is how it ended (nil: discarded, never reported started). A
	// pointer: a live agent's Process keeps no Exit (120 bytes; issue 22's
	// memory).
	exit *Exit

	// sigMu orders signals and the reap: gone is set, under it, when the
	// process was reaped (or abandoned by Close), and a signal is sent
	// only before.
	sigMu sync.Mutex
	gone  bool
}

// SelfCgroup is the leaf the process runs in (Cgroup/self), "" with
// process groups. It is derived, not kept: one path fewer held for every
// live agent (issue 22's memory).
func (p *Process) SelfCgroup() string {
	if p.Cgroup == "" {
		return ""
	}
	return selfDir(p.Cgroup)
}

// Done is closed once the process has been reaped (or abandoned by Close).
func (p *Process) Done() <-chan struct{} { return p.done }

// Exit returns how the process ended, once Done is closed.
func (p *Process) Exit() (Exit, bool) {
	select {
	case <-p.done:
		return p.ended(), true
	default:
		return Exit{}, false
	}
}

// PeekExit returns how the process ended once it has exited, reaped or
// not: its Exit once Done is closed, else the status the kernel keeps for
// its reaping (waitid WNOWAIT), which leaves the zombie to the reaper. The
// Exit of a peek has no end time and no resource use. False while it runs,
// and where only its reaping tells (the init of a PID namespace reports
// its child's status on a pipe that the reap reads): wait for Done then.
// A cancellation records a killed subtree's ends while the kill's last
// exits are still being reaped (Runner.stopAndRecord).
func (p *Process) PeekExit() (Exit, bool) {
	if e, ok := p.Exit(); ok {
		return e, true
	}
	if p.status != nil {
		return Exit{}, false
	}
	// Under sigMu the reaper cannot take the pid meanwhile (reap), so the
	// status read is this process's, not a later child's of the same pid.
	p.sigMu.Lock()
	defer p.sigMu.Unlock()
	if p.gone {
		return Exit{}, false // reaped this instant: Done closes at once
	}
	var si siginfoChild
	if err := waitid(unix.P_PID, p.Pid, &si, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil); err != nil || si.Pid != int32(p.Pid) {
		return Exit{}, false
	}
	e := Exit{ID: p.ID, Pid: p.Pid, Started: p.Started, Code: -1}
	switch si.Code {
	case cldExited:
		e.Code = int(si.Status)
	case cldKilled, cldDumped:
		e.Signal = syscall.Signal(si.Status)
		e.CoreDumped = si.Code == cldDumped
	default:
		return Exit{}, false // stopped or traced, not exited
	}
	return e, true
}

// ended is how the process ended, once Done is closed.
func (p *Process) ended() Exit {
	if p.exit == nil {
		return Exit{}
	}
	return *p.exit
}

// Wait waits for the process to end or ctx to be done.
func (p *Process) Wait(ctx context.Context) (Exit, error) {
	select {
	case <-p.done:
		e := p.ended()
		return e, e.Err
	case <-ctx.Done():
		return Exit{}, ctx.Err()
	}
}

// ErrProcessDone is returned by Signal once the process has been reaped.
var ErrProcessDone = errors.New("supervisor: process already finished")

// Signal sends sig to the process (not its group). It can never hit a
// recycled pid, without holding a pidfd: until it is reaped the process is
// a child of this one whose pid is claimed, which only the supervisor's
// reaping loop reaps (reap.go), under sigMu, and setting gone; a child's
// pid, even a zombie's, is not reused before its parent reaps it. So a
// kill(pid) under sigMu while !gone reaches this process (running, or a
// zombie, which ignores it).
func (p *Process) Signal(sig syscall.Signal) error {
	p.sigMu.Lock()
	defer p.sigMu.Unlock()
	if p.gone {
		return ErrProcessDone
	}
	if err := unix.Kill(p.Pid, sig); err != nil {
		if err == unix.ESRCH {
			return ErrProcessDone
		}
		return err
	}
	return nil
}

// Start starts spec's process directly inside the leaf <group>/self of the
// agent's new group (clone3 CLONE_INTO_CGROUP), in its own process group,
// with a pidfd that the supervisor waits on. An agent may run one process at
// a time; after it exited, Start may run another in the same group. Start
// refuses (ErrFrozen) while a Freeze of the agent, or a subtree Freeze of it
// or of an enclosing agent, is in force or in progress: a process cloned
// into a frozen group would freeze before its exec, and Start, waiting for
// the exec, with it.
func (s *Supervisor) Start(ctx context.Context, spec Spec) (*Process, error) {
	if spec.Direct != nil {
		defer spec.Direct.Close() // its duplicated descriptors, whatever happens
	}
	if spec.ID <= 0 {
		return nil, fmt.Errorf("supervisor: start: agent id %d is not positive", spec.ID)
	}
	if len(spec.Argv) == 0 || spec.Argv[0] == "" {
		return nil, fmt.Errorf("supervisor: start agent %d: empty argv", spec.ID)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	argv0 := spec.Argv[0]
	if !strings.Contains(argv0, "/") {
		p, err := exec.LookPath(argv0)
		if err != nil {
			return nil, fmt.Errorf("supervisor: start agent %d: %w", spec.ID, err)
		}
		argv0 = p
	}

	if spec.Credential == nil || int(spec.Credential.Uid) == os.Geteuid() {
		s.mayBeFrozen.Store(true) // it may write cgroup.freeze
	}
	a, created, err := s.beginStart(spec)
	if err != nil {
		return nil, err
	}
	p, err := s.spawn(a, spec, argv0)
	s.mu.Lock()
	close(a.starting)
	a.starting = nil
	if err == nil {
		// Watched under mu, so that its end is reported after this.
		if err = s.watch(p); err == nil {
			a.proc = p
			s.procs[p.Pid] = p
		} else {
			discard(p) // before its group is removed
		}
	}
	if err != nil && created {
		s.forgetLocked(a)
		if s.cg {
			unix.Rmdir(selfDir(a.path))
			unix.Rmdir(a.path)
		}
	}
	s.mu.Unlock()
	if err != nil {
		if errors.Is(err, fs.ErrPermission) {
			if why := closedOnTheWay(spec.Dir, spec.Credential); why != "" {
				return nil, fmt.Errorf("supervisor: start agent %d: %s: %w", spec.ID, why, err)
			}
		}
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
			// The program (or its directory) is what the operator must fix.
			return nil, fmt.Errorf("supervisor: start agent %d: program %s (run in %s): %w", spec.ID, argv0, spec.Dir, err)
		}
		return nil, fmt.Errorf("supervisor: start agent %d: %w", spec.ID, err)
	}
	s.log.Debug("started", keyAgent, spec.ID, keyPid, p.Pid, keyCgroup, p.Cgroup)
	return p, nil
}

// discard kills and reaps a process that Start could not watch (the
// supervisor is closed); it was never reported started.
func discard(p *Process) {
	p.Signal(syscall.SIGKILL)
	var si siginfoChild
	p.sigMu.Lock()
	waitid(unix.P_PID, p.Pid, &si, unix.WEXITED, nil)
	p.gone = true
	p.sigMu.Unlock()
	unclaim(p.Pid)
	if p.status != nil {
		p.status.Close()
	}
	close(p.done)
}

// beginStart finds or creates the agent's record and marks it starting.
func (s *Supervisor) beginStart(spec Spec) (a *agent, created bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, false, ErrClosed
	}
	if a = s.agents[spec.ID]; a != nil {
		switch {
		case a.stopping != nil:
			return nil, false, fmt.Errorf("supervisor: start agent %d: %w", spec.ID, ErrStopping)
		case a.starting != nil || a.proc != nil && !isDone(a.proc):
			return nil, false, fmt.Errorf("supervisor: start agent %d: %w", spec.ID, ErrRunning)
		case s.freezeBlocksLocked(a):
			return nil, false, fmt.Errorf("supervisor: start agent %d: %w", spec.ID, ErrFrozen)
		}
		a.starting = make(chan struct{})
		return a, false, nil
	}
	parentPath := s.root
	if spec.ParentID != 0 && !spec.Detached {
		par := s.agents[spec.ParentID]
		if par == nil {
			if par, err = s.placeholderLocked(spec.ParentID); err != nil {
				return nil, false, err
			}
		}
		if par.stopping != nil {
			return nil, false, fmt.Errorf("supervisor: start agent %d: parent %d: %w", spec.ID, spec.ParentID, ErrStopping)
		}
		parentPath = par.path
	}
	a = &agent{id: spec.ID, path: filepath.Join(parentPath, groupName(spec.ID)), starting: make(chan struct{})}
	if s.freezeBlocksLocked(a) {
		return nil, false, fmt.Errorf("supervisor: start agent %d: parent %d: %w", spec.ID, spec.ParentID, ErrFrozen)
	}
	s.rememberLocked(a)
	return a, true, nil
}

// placeholderLocked creates an empty group (with its empty self leaf) at
// the root for a parent the supervisor does not run (yet), so its children
// can nest in it.
func (s *Supervisor) placeholderLocked(id kin.AgentID) (*agent, error) {
	a := &agent{id: id, path: filepath.Join(s.root, groupName(id))}
	if s.cg {
		if err := s.makeGroup(a.path); err != nil {
			return nil, fmt.Errorf("supervisor: group for parent %d: %w", id, err)
		}
	}
	s.rememberLocked(a)
	return a, nil
}

// makeGroup creates the agent group dir and its self leaf; either may
// exist. The controllers enabled down kin's tree are enabled in dir too,
// so that its children's groups can be limited in turn.
func (s *Supervisor) makeGroup(dir string) error {
	err := os.Mkdir(dir, 0o755)
	if err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	if err == nil {
		if err := cgroup.EnableControllers(dir, s.controllers); err != nil {
			return err
		}
	}
	if err := os.Mkdir(selfDir(dir), 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	return nil
}

func isDone(p *Process) bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// spawn forks and execs; a.starting keeps Stop away meanwhile.
func (s *Supervisor) spawn(a *agent, spec Spec, argv0 string) (*Process, error) {
	sys := &syscall.SysProcAttr{Setpgid: true, Credential: spec.Credential}
	env := spec.Env
	if s.cg {
		if err := s.makeGroup(a.path); err != nil {
			return nil, err
		}
		if _, err := cgroup.SetLimits(a.path, spec.Limits, s.controllers); err != nil {
			return nil, err
		}
		// A Freeze that began before a.starting was set has been seen by
		// beginStart; one that ended shows here; later ones wait for us.
		// Until a group may be frozen (mayBeFrozen, as a stop reasons)
		// there is nothing to read.
		if s.mayBeFrozen.Load() {
			if d := frozenDir(selfDir(a.path), s.mount.Dir); d != "" {
				return nil, fmt.Errorf("%w (cgroup %s is frozen)", ErrFrozen, d)
			}
		}
		cfd, err := cgroup.Open(selfDir(a.path))
		if err != nil {
			return nil, err
		}
		defer unix.Close(cfd)
		sys.UseCgroupFD = true
		sys.CgroupFD = cfd
		if s.userns {
			userNamespaceAttr(sys, spec.Credential)
		}
	} else {
		env = append(env[:len(env):len(env)], EnvMarker+"="+s.marker(a.id))
	}
	var statusR *os.File
	if s.pidns {
		namespaceAttr(sys, spec.Credential)
		r, w, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		defer w.Close()
		statusR = r
		spec.ExtraFiles = append(spec.ExtraFiles[:len(spec.ExtraFiles):len(spec.ExtraFiles)], w)
		env = append(env, StatusFDEnv+"="+strconv.Itoa(2+len(spec.ExtraFiles)))
	}
	files, outs, closeAfter, err := s.stdio(spec)
	defer func() {
		for _, f := range closeAfter {
			f.Close()
		}
	}()
	if err != nil {
		return nil, err
	}
	fds := make([]uintptr, len(files))
	for i, f := range files {
		fds[i] = f.Fd()
	}
	attr := &syscall.ProcAttr{Dir: spec.Dir, Env: env, Files: fds, Sys: sys}

	var pid int
	var started time.Time
	direct := false
	if spec.Direct != nil && s.DirectStarts() {
		pid, started, direct = s.startDirect(spec, attr)
	}
	if !direct {
		// From a descriptor table of its own, as a direct start: a fork
		// copies its caller's, a few descriptors per live agent.
		pid, err = sandbox.ForkFromOwnTable(carryOf(attr), func(fds []int) (int, error) {
			return forkCarried(argv0, spec.Argv, attr, fds, &started)
		})
	}
	runtime.KeepAlive(files)
	if err != nil {
		for _, o := range outs {
			o.r.Close()
		}
		if statusR != nil {
			statusR.Close()
		}
		return nil, err
	}
	p := &Process{
		ID:      a.id,
		Pid:     pid,
		Started: started,
		sup:     s,
		status:  statusR,
		done:    make(chan struct{}),
	}
	if s.pidns {
		// The namespace is the child's from the clone on; the pid is
		// claimed, so it cannot be reaped and recycled before this.
		ns := pidNS(pid)
		s.mu.Lock()
		a.ns, a.nsInit = ns, pid
		s.byNS[ns] = a
		s.mu.Unlock()
	}
	if s.cg {
		p.Cgroup = a.path
	}
	for _, o := range outs {
		s.mu.Lock()
		s.outs[o.r] = struct{}{}
		s.mu.Unlock()
		s.wg.Add(1)
		go s.copyOutput(o)
	}
	return p, nil
}

// startDirect starts spec.Direct's command without the shim, with attr's
// first three descriptors. It reports false where the shim must start it
// instead: nothing of the direct start is left then.
func (s *Supervisor) startDirect(spec Spec, attr *syscall.ProcAttr) (int, time.Time, bool) {
	sys := *attr.Sys
	sys.Ptrace = true
	dattr := &syscall.ProcAttr{Dir: attr.Dir, Env: attr.Env, Files: attr.Files[:3], Sys: &sys}
	argv := spec.Direct.Argv()
	var started time.Time
	// The fork runs on a thread with a descriptor table of its own
	// (sandbox.Direct.Start): the stdio and the cgroup are carried there.
	pid, err := spec.Direct.Start(carryOf(dattr), func(fds []int) (int, error) {
		return forkCarried(argv[0], argv, dattr, fds, &started)
	})
	switch {
	case err == nil:
		// While it stopped at its first instruction, the traced child may
		// have hidden an exited one from the reaping loop
		// (reapChildren): the watch that follows kicks the loop if so.
		s.directStarts.Add(1)
		return pid, started, true
	case pid > 0:
		// Killed before its first instruction: reaped here (claimed, and
		// not watched), then the shim starts the agent.
		var si siginfoChild
		waitid(unix.P_PID, pid, &si, unix.WEXITED, nil)
		unclaim(pid)
		s.log.Warn("direct start refused; the sandbox shim starts it", keyAgent, spec.ID, "err", err)
	default:
		s.log.Debug("direct start failed; the sandbox shim starts it", keyAgent, spec.ID, "err", err)
	}
	kickChildren() // no watch follows this child: what it hid is looked for now
	return 0, time.Time{}, false
}

// carryOf lists the descriptors a fork with attr uses: its Files, then
// its cgroup's where it has one (sandbox.ForkFromOwnTable's carry).
func carryOf(attr *syscall.ProcAttr) []int {
	carry := make([]int, 0, len(attr.Files)+1)
	for _, f := range attr.Files {
		carry = append(carry, int(f))
	}
	if attr.Sys.UseCgroupFD {
		carry = append(carry, attr.Sys.CgroupFD)
	}
	return carry
}

// forkCarried forks and execs argv0 with attr, its descriptors taken as
// fds (the forking thread's numbers of carryOf(attr)), under spawnMu
// until the new pid is claimed; started is set to when it forked.
func forkCarried(argv0 string, argv []string, attr *syscall.ProcAttr, fds []int, started *time.Time) (int, error) {
	a, sys := *attr, *attr.Sys
	a.Files = make([]uintptr, len(attr.Files))
	for i := range a.Files {
		a.Files[i] = uintptr(fds[i])
	}
	if sys.UseCgroupFD {
		sys.CgroupFD = fds[len(attr.Files)]
	}
	a.Sys = &sys
	spawnMu.RLock()
	defer spawnMu.RUnlock()
	*started = time.Now()
	pid, err := syscall.ForkExec(argv0, argv, &a)
	if err == nil {
		claim(pid)
	}
	return pid, err
}

// output is a pipe whose read end r is copied to w.
type output struct {
	r *os.File
	w io.Writer
}

// stdio builds fds 0, 1, 2 and ExtraFiles, the output pipes to drain, and
// the parent's copies of the child's ends (closeAfter).
func (s *Supervisor) stdio(spec Spec) (files []*os.File, outs []output, closeAfter []*os.File, err error) {
	files = []*os.File{s.devnull}
	if spec.LogPath != "" {
		f, err := os.OpenFile(spec.LogPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			return nil, nil, nil, err
		}
		closeAfter = append(closeAfter, f)
		files = append(files, f, f)
	} else {
		for i, w := range []io.Writer{spec.Stdout, spec.Stderr} {
			switch w := w.(type) {
			case nil:
				files = append(files, s.devnull)
			case *os.File:
				files = append(files, w)
			default:
				if i == 1 && sameWriter(spec.Stdout, spec.Stderr) {
					files = append(files, files[1]) // one pipe, one copier: no concurrent writes
					continue
				}
				r, pw, err := os.Pipe()
				if err != nil {
					for _, o := range outs {
						o.r.Close()
					}
					return nil, nil, closeAfter, err
				}
				outs = append(outs, output{r: r, w: w})
				closeAfter = append(closeAfter, pw)
				files = append(files, pw)
			}
		}
	}
	files = append(files, spec.ExtraFiles...)
	return files, outs, closeAfter, nil
}

func sameWriter(a, b io.Writer) bool {
	ta, tb := reflect.TypeOf(a), reflect.TypeOf(b)
	return ta == tb && ta.Comparable() && a == b
}

func (s *Supervisor) copyOutput(o output) {
	defer s.wg.Done()
	io.Copy(o.w, o.r)
	s.mu.Lock()
	delete(s.outs, o.r)
	s.mu.Unlock()
	o.r.Close()
}

// finishProcess reports p's end once the reaping loop reaped it (ok), or
// could not (someone else reaped it, or Close abandoned it): it unclaims
// the pid, closes p.done and calls OnExit.
func (s *Supervisor) finishProcess(p *Process, si siginfoChild, ru unix.Rusage, ok bool) {
	defer func() {
		if p.status != nil {
			p.status.Close()
		}
	}()
	e := Exit{ID: p.ID, Pid: p.Pid, Started: p.Started, Ended: time.Now(), Code: -1}
	// Unclaim only after reaping: until then a sweep must not touch pid.
	// An abandoned (Close) or stolen pid is unclaimed too, so that a later
	// supervisor sweeping the same root may reap it.
	unclaim(p.Pid)
	if ok {
		e.UserTime = time.Duration(ru.Utime.Nano())
		e.SystemTime = time.Duration(ru.Stime.Nano())
		switch si.Code {
		case cldExited:
			e.Code = int(si.Status)
			// An init reports its child's own status: the init of a PID
			// namespace cannot die of its child's signal itself.
			if ws, ok := readInitStatus(p.status); ok {
				e.Code = -1
				switch {
				case ws.Exited():
					e.Code = ws.ExitStatus()
				case ws.Signaled():
					e.Signal, e.CoreDumped = ws.Signal(), ws.CoreDump()
				}
			}
		case cldKilled, cldDumped:
			e.Signal = syscall.Signal(si.Status)
			e.CoreDumped = si.Code == cldDumped
		}
	} else {
		e.Err = ErrClosed
	}
	s.mu.Lock()
	if s.procs[p.Pid] == p {
		delete(s.procs, p.Pid)
	}
	s.mu.Unlock()
	p.exit = &e
	close(p.done)
	if ok {
		s.log.Debug("exited", keyAgent, p.ID, keyPid, p.Pid, keyExit, e.String())
	}
	if s.cfg.OnExit != nil {
		s.cfg.OnExit(e)
	}
}
