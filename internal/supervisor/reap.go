package supervisor

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The children of a process are one namespace, whatever number of
// Supervisors it runs, so the little state that keeps reaping paths apart is
// process-wide (the one exception to "no package-level mutable state"):
//
//   - spawnMu: Start holds it shared from fork until the new pid is claimed;
//     an orphan sweep holds it exclusively, so a sweep never sees a pid that
//     was forked but not yet claimed.
//   - claimed: pids whose status belongs to a supervisor's reaping
//     goroutine, counted, since a pid reaped by one supervisor can be reused
//     by a new child before it unclaims it. Sweeps never reap claimed pids;
//     a pid is unclaimed only after it was reaped.
var (
	spawnMu sync.RWMutex
	claimMu sync.Mutex
	claimed = map[int]int{}
	selfPid = os.Getpid()
)

func claim(pid int) {
	claimMu.Lock()
	claimed[pid]++
	claimMu.Unlock()
}

func unclaim(pid int) {
	claimMu.Lock()
	if claimed[pid]--; claimed[pid] <= 0 {
		delete(claimed, pid)
	}
	claimMu.Unlock()
}

func isClaimed(pid int) bool {
	claimMu.Lock()
	n := claimed[pid]
	claimMu.Unlock()
	return n > 0
}

// siginfoChild is siginfo_t as waitid fills it for SIGCHLD on 64-bit Linux
// (Go's internal/syscall/unix.SiginfoChild; errno and code swap on MIPS,
// which kin does not target). x/sys/unix.Siginfo hides the pid and status.
type siginfoChild struct {
	Signo  int32
	Errno  int32
	Code   int32
	_      int32
	Pid    int32
	UID    uint32
	Status int32
	_      [100]byte
}

var _ [0]struct{} = [unsafe.Sizeof(siginfoChild{}) - unsafe.Sizeof(unix.Siginfo{})]struct{}{}

func (s *siginfoChild) raw() *unix.Siginfo { return (*unix.Siginfo)(unsafe.Pointer(s)) }

// si_code values for SIGCHLD.
const (
	cldExited = 1
	cldKilled = 2
	cldDumped = 3
)

// waitid retries EINTR.
func waitid(idtype, id int, si *siginfoChild, options int, ru *unix.Rusage) error {
	for {
		*si = siginfoChild{}
		err := unix.Waitid(idtype, id, si.raw(), options, ru)
		if err != unix.EINTR {
			return err
		}
	}
}

// childPids lists this process's children, zombies included, from every
// thread's /proc/self/task/<tid>/children (a child belongs to the thread that
// forked it or, for a re-parented orphan, to a live thread of the reaper).
func childPids() []int {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return nil
	}
	var pids []int
	for _, t := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + t.Name() + "/children")
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				pids = append(pids, n)
			}
		}
	}
	return pids
}

// sweepAgain is how long the SIGCHLD sweep waits before looking again
// when the exited child it found first is a supervised one (see sweep).
const sweepAgain = 10 * time.Millisecond

// sweep reaps exited orphans (processes that re-parented to this subreaper)
// that s owns, without touching claimed pids (sweepAll). It runs on
// SIGCHLD.
//
// When the first exited child the kernel names is a claimed one, which a
// supervisor reaps in a moment, it does not list every child now: a
// cascade's thousand exits would each cost a scan of the thousand children
// (about 30 ms of CPU per 1,000-agent cascade). It looks again sweepAgain
// later instead, when those are reaped, and ignores SIGCHLD until then, so
// an orphan exiting at the same time is reaped at most that much later.
func (s *Supervisor) sweep() {
	if s.sweepLater.Load() {
		return // one is due shortly: until then, not even the peek (it walks every child)
	}
	var si siginfoChild
	if err := waitid(unix.P_ALL, 0, &si, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil); err != nil || si.Pid == 0 {
		return // no exited child at all
	}
	if isClaimed(int(si.Pid)) {
		if s.sweepLater.CompareAndSwap(false, true) {
			time.AfterFunc(sweepAgain, func() {
				s.sweepLater.Store(false)
				select {
				case s.sigch <- syscall.SIGCHLD:
				default: // a sweep is due already
				}
			})
		}
		return
	}
	s.sweepAll()
}

// sweepAll is sweep's scan of every child.
func (s *Supervisor) sweepAll() {
	spawnMu.Lock()
	defer spawnMu.Unlock()
	var si siginfoChild
	// Fast path: no exited child at all.
	if err := waitid(unix.P_ALL, 0, &si, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil); err != nil || si.Pid == 0 {
		return
	}
	for _, pid := range childPids() {
		if isClaimed(pid) {
			continue
		}
		// Peek (WNOWAIT): only exited children are candidates.
		if err := waitid(unix.P_PID, pid, &si, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil); err != nil || si.Pid == 0 {
			continue
		}
		if !s.ownsOrphan(pid) {
			continue
		}
		if err := waitid(unix.P_PID, pid, &si, unix.WEXITED|unix.WNOHANG, nil); err == nil && si.Pid != 0 {
			s.log.Debug("reaped orphan", keyPid, pid)
		}
	}
}

// ownsOrphan decides whether an unclaimed exited child is one of s's orphans
// (and not, say, a child that os/exec started elsewhere in the daemon and
// whose cmd.Wait is pending). With cgroup2 the child's group tells exactly.
// With process groups, orphans of agents are outside the daemon's process
// group (every agent gets its own, and setsid makes another); children that
// other daemon code starts stay in the daemon's group.
func (s *Supervisor) ownsOrphan(pid int) bool {
	if s.cg {
		dir, err := s.mount.DirOfPID(pid)
		return err == nil && within(dir, s.root)
	}
	st, err := readStat(pid)
	return err == nil && st.pgid != syscall.Getpgrp()
}

// reapOrphansIn waits for, and reaps, the unclaimed children of this process
// whose cgroup is dir or below it: re-parented orphans of a group being
// stopped. Call it once the group is empty: they are then all exiting.
func (s *Supervisor) reapOrphansIn(ctx context.Context, dir string) {
	var fds []*os.File
	spawnMu.Lock()
	for _, pid := range childPids() {
		if isClaimed(pid) {
			continue
		}
		d, err := s.mount.DirOfPID(pid)
		if err != nil || !within(d, dir) {
			continue
		}
		// pid is an unreaped child and only holders of spawnMu reap
		// unclaimed children, so pidfd_open names the right process.
		fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
		if err != nil {
			continue
		}
		fds = append(fds, os.NewFile(uintptr(fd), "pidfd"))
	}
	spawnMu.Unlock()
	for _, f := range fds {
		reapPidfd(ctx, f)
		f.Close()
	}
}

// reapPidfd waits (in the netpoller) until the child behind f has exited,
// then reaps it. It returns false with a zero siginfo when ctx ended, f was
// closed or someone else reaped the child.
func reapPidfd(ctx context.Context, f *os.File) (siginfoChild, unix.Rusage, bool) {
	var si siginfoChild
	var ru unix.Rusage
	rc, err := f.SyscallConn()
	if err != nil {
		return si, ru, false
	}
	if ctx.Done() != nil {
		stop := context.AfterFunc(ctx, func() { f.SetReadDeadline(time.Now()) })
		defer stop()
	}
	var werr error
	err = rc.Read(func(fd uintptr) bool {
		werr = waitid(unix.P_PIDFD, int(fd), &si, unix.WEXITED|unix.WNOHANG, &ru)
		if werr == unix.EAGAIN || (werr == nil && si.Pid == 0) {
			return false // still running: wait for the pidfd to turn readable
		}
		return true
	})
	if err != nil || werr != nil {
		return siginfoChild{}, ru, false
	}
	return si, ru, true
}

// reaper waits for every supervised process of one Supervisor at once: the
// processes' pidfds are in one epoll set, whose own descriptor is parked in
// the Go netpoller, and one goroutine (reapLoop) reaps whichever turn
// readable. A live process then costs a pidfd and an epoll entry, not a
// goroutine and its stack.
type reaper struct {
	ep   *os.File // the epoll set, non-blocking, in the netpoller
	epfd int      // ep's descriptor, valid until ep is closed (closed says)

	mu     sync.Mutex
	closed bool
	procs  map[int32]*Process // by pidfd
}

func newReaper() (*reaper, error) {
	fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	if err := unix.SetNonblock(fd, true); err != nil { // so that os.NewFile puts it in the netpoller
		unix.Close(fd)
		return nil, os.NewSyscallError("fcntl", err)
	}
	return &reaper{ep: os.NewFile(uintptr(fd), "epoll"), epfd: fd, procs: map[int32]*Process{}}, nil
}

// add watches p's pidfd. Edge-triggered: an exit is reported once (a pidfd
// already readable when added is reported at once too).
func (r *reaper) add(p *Process) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return ErrClosed
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLET, Fd: int32(p.pidfdNum)}
	if err := unix.EpollCtl(r.epfd, unix.EPOLL_CTL_ADD, p.pidfdNum, &ev); err != nil {
		return os.NewSyscallError("epoll_ctl", err)
	}
	r.procs[int32(p.pidfdNum)] = p
	return nil
}

// close stops reapLoop; abandoned then hands back what it did not reap.
func (r *reaper) close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.ep.Close()
}

// abandoned empties the set once reapLoop has returned.
func (r *reaper) abandoned() []*Process {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*Process, 0, len(r.procs))
	for fd, p := range r.procs {
		out = append(out, p)
		delete(r.procs, fd)
	}
	return out
}

// reapLoop is the only reaper of supervised processes: it waits for the
// epoll set to turn readable in the netpoller (no thread is parked),
// takes the ready pidfds and reaps each with waitid(P_PIDFD, WNOHANG). It
// returns when the reaper is closed.
func (s *Supervisor) reapLoop() {
	defer s.wg.Done()
	r := s.reaper
	rc, err := r.ep.SyscallConn()
	if err != nil {
		return
	}
	events := make([]unix.EpollEvent, 256)
	for {
		var n int
		var werr error
		err := rc.Read(func(fd uintptr) bool {
			for {
				n, werr = unix.EpollWait(int(fd), events, 0)
				if werr != unix.EINTR {
					break
				}
			}
			return n != 0 || werr != nil // none ready: wait in the netpoller
		})
		if err != nil {
			return // closed
		}
		if werr != nil {
			s.log.Error("epoll_wait on the supervised processes' pidfds", keyErr, werr)
			return
		}
		for _, ev := range events[:n] {
			s.reapReady(ev.Fd)
		}
	}
}

// reapReady reaps the process behind a pidfd that turned readable.
func (s *Supervisor) reapReady(fd int32) {
	r := s.reaper
	r.mu.Lock()
	p := r.procs[fd]
	r.mu.Unlock()
	if p == nil {
		return
	}
	var si siginfoChild
	var ru unix.Rusage
	err := waitid(unix.P_PIDFD, int(fd), &si, unix.WEXITED|unix.WNOHANG, &ru)
	if err == nil && si.Pid == 0 {
		return // not exited after all: the pidfd turns readable again when it does
	}
	r.mu.Lock()
	delete(r.procs, fd)
	r.mu.Unlock()
	// err (ECHILD): someone else reaped it; the status is lost.
	s.finishProcess(p, si, ru, err == nil)
}
