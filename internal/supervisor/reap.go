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
//   - claimed: pids whose status belongs to a pidfd waiter, counted, since a
//     pid reaped by one waiter can be reused by a new child before that
//     waiter unclaims it. Sweeps never reap claimed pids; a waiter unclaims
//     its pid only after reaping it.
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

// sweep reaps exited orphans (processes that re-parented to this subreaper)
// that s owns, without touching claimed pids. It runs on SIGCHLD.
func (s *Supervisor) sweep() {
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
