package sandbox

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// A direct start forks from a thread of the daemon, and a fork copies the
// descriptor table of the thread that calls it: the daemon holds two or
// so descriptors per live agent (its pidfd, its log pipe, its socket), so
// every start copied thousands of them and the agent's execve closed them
// all again (each close-on-exec descriptor's flush, its dnotify and lock
// checks): the start's cost grew with the number of live agents (issue
// 22: about 7 % of a burst of 1,000 spawns' CPU at ~2,000 descriptors).
//
// The start's thread instead takes a table of its own before it forks:
// close_range(base, ~0, CLOSE_RANGE_UNSHARE) gives it a copy of the shared
// table's first base descriptors only (those below base: the standard
// ones and the Go runtime's own, see tableBase), without closing anything
// of the daemon's, and pidfd_getfd copies in the few descriptors the start
// needs (the child's stdio, its cgroup, the grants, the view). The daemon's
// other threads keep the shared table; the private one goes with the
// thread, which ends after the start.
//
// The runtime uses two descriptors of its own from whichever thread runs
// it: the netpoller's epoll (a stop-the-world's restart polls it; a file
// opened on the thread is registered in it) and its eventfd (a timer that
// moves wakes the poller through it). Both must have the same numbers in
// the private table as in the shared one, which is why the table keeps
// every descriptor below base rather than only 0, 1 and 2, and why base is
// found once, after the netpoller surely exists. Code on the thread may
// use no other descriptor of the daemon than those it carries.

// fdBase is tableBase's result, found once.
var fdBase struct {
	once sync.Once
	n    int // 0: no private tables (the runtime's descriptors were not found)
}

// tableBase is one more than the highest descriptor of the Go runtime's
// netpoller (its epoll and its eventfd), found in /proc/self/fd once the
// netpoller exists; 0 where they cannot be told apart.
func tableBase() int {
	fdBase.once.Do(func() {
		// The netpoller is made on the first pollable descriptor: a pipe
		// makes sure it exists before its descriptors are looked for.
		r, w, err := os.Pipe()
		if err != nil {
			return
		}
		r.Close()
		w.Close()
		fdBase.n = runtimeFDBase("/proc/self/fd")
	})
	return fdBase.n
}

// runtimeFDBase is one more than the highest epoll or eventfd descriptor
// listed in dir (a /proc fd directory), 0 where there is none or dir
// cannot be read.
func runtimeFDBase(dir string) int {
	f, err := os.Open(dir)
	if err != nil {
		return 0
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return 0
	}
	base := 0
	for _, n := range names {
		fd, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		target, err := os.Readlink(dir + "/" + n)
		if err != nil {
			continue
		}
		if strings.HasPrefix(target, "anon_inode:[eventpoll]") || strings.HasPrefix(target, "anon_inode:[eventfd]") {
			base = max(base, fd+1)
		}
	}
	if base < 3 {
		return 0
	}
	return base
}

// privateTable gives the calling thread, which must be locked and end
// after the start, a descriptor table of its own (above) holding the
// shared table's descriptors below tableBase and copies of carry; carried
// are carry's numbers there, in order, each close-on-exec, as is every
// descriptor of the new table from 3 up. own reports that the thread's
// table is its own, even when err is not nil (some carry missing): the
// thread may then use no descriptor of carry. With own false and err nil
// nothing changed (no private tables here): carried is carry.
func privateTable(carry []int) (carried []int, own bool, err error) {
	base := tableBase()
	if base == 0 || onMainThread() {
		// Never the main thread's: it outlives the goroutine (the runtime
		// wedges it), and pidfd_getfd below reads the thread group
		// leader's table, which must stay the shared one.
		return carry, false, nil
	}
	if err := unix.CloseRange(uint(base), math.MaxUint32, unix.CLOSE_RANGE_UNSHARE); err != nil {
		// ENOSYS, EINVAL (a kernel before 5.9): the shared table, as before.
		return carry, false, nil
	}
	self, err := unix.PidfdOpen(os.Getpid(), 0)
	if err != nil {
		return nil, true, err
	}
	defer unix.Close(self)
	carried = make([]int, len(carry))
	for i, fd := range carry {
		if fd < base && fd >= 0 {
			carried[i] = fd // in the copy already
			continue
		}
		// pidfd_getfd duplicates from the thread group leader's table,
		// the shared one, and sets close-on-exec.
		if carried[i], err = unix.PidfdGetfd(self, fd, 0); err != nil {
			return nil, true, err
		}
	}
	if err := unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return nil, true, err
	}
	return carried, true, nil
}

// ForkFromOwnTable runs fork on a new OS thread with a descriptor table of
// its own (privateTable; the thread ends after it), so that the fork copies
// the few descriptors it needs rather than every one the process holds:
// carry lists them, and fork gets their numbers there, in order. fork may
// use no other descriptor of the caller's, must leave none to the caller
// (SysProcAttr.PidFD, os.StartProcess and os/exec make one: it would be a
// number in the thread's table, gone with it), and must not rely on the
// thread outliving it (no Pdeathsig: it follows the forking thread). Where
// no table of its own can be made, fork runs on the shared one.
func ForkFromOwnTable(carry []int, fork func(fds []int) (int, error)) (int, error) {
	return forkFromOwnTable(carry, fork, onMainThread)
}

// onMainThread reports that the calling goroutine, locked, runs on the
// process's main thread.
func onMainThread() bool { return unix.Gettid() == os.Getpid() }

// forkFromOwnTable is ForkFromOwnTable, told by mainThread whether a
// locked goroutine runs on the main thread (a test says yes once).
func forkFromOwnTable(carry []int, fork func(fds []int) (int, error), mainThread func() bool) (int, error) {
	type result struct {
		pid int
		err error
	}
	var onThread func(done chan<- result)
	onThread = func(done chan<- result) {
		runtime.LockOSThread()
		if mainThread() {
			// The main thread never ends (the runtime parks it), so its
			// table would stay the daemon's. While this goroutine holds
			// it, a new one runs on another thread: the start goes there.
			inner := make(chan result, 1)
			go onThread(inner)
			r := <-inner
			runtime.UnlockOSThread()
			done <- r
			return
		}
		fds, own, err := privateTable(carry)
		if err != nil {
			done <- result{0, fmt.Errorf("sandbox: the fork's descriptor table: %w", err)}
			return // locked: the thread ends with its table
		}
		if !own {
			runtime.UnlockOSThread()
		}
		pid, err := fork(fds)
		done <- result{pid, err}
		// Locked where own: the thread ends with its table.
	}
	done := make(chan result, 1)
	go onThread(done)
	r := <-done
	return r.pid, r.err
}
