package supervisor

import (
	"cmp"
	"context"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kin-agents/kin/internal/sandbox"
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

// siginfoChild, the cld* codes and waitid are the sandbox's (the direct
// start waits for its child's first stop with them).
type siginfoChild = sandbox.ChildInfo

const (
	cldExited  = sandbox.ChildExited
	cldKilled  = sandbox.ChildKilled
	cldDumped  = sandbox.ChildDumped
	cldTrapped = sandbox.ChildTrapped
)

var waitid = sandbox.WaitChild

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
	held := reapingHeld() // a Stop's kill: its exits come by the thousand, and are claimed
	if !held {
		if err := waitid(unix.P_ALL, 0, &si, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil); err != nil || si.Pid == 0 {
			return // no exited child at all
		}
	}
	if held || isClaimed(int(si.Pid)) {
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
//
// Listing the children reads every thread's children file under spawnMu
// held exclusively, which a shutdown stopping a hundred subtrees at once
// made a hundred times in a row (the last stop waited a second and more on
// a busy machine): one list, begun after the caller came (so after its
// group emptied), serves every caller waiting for it (unclaimedChildren).
func (s *Supervisor) reapOrphansIn(ctx context.Context, dir string) {
	pids := unclaimedChildren()
	if len(pids) == 0 {
		return
	}
	var fds []*os.File
	// Shared: no sweep reaps an unclaimed child meanwhile, so a pid listed
	// is still the same child when its pidfd is opened. (Another caller
	// whose group holds dir may reap one first: then its pidfd_open or its
	// wait fails, and its pid names no new child in dir, where nothing
	// starts once it is stopped.)
	spawnMu.RLock()
	for _, pid := range pids {
		if isClaimed(pid) {
			continue
		}
		d, err := s.mount.DirOfPID(pid)
		if err != nil || !within(d, dir) {
			continue
		}
		fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
		if err != nil {
			continue
		}
		fds = append(fds, os.NewFile(uintptr(fd), "pidfd"))
	}
	spawnMu.RUnlock()
	for _, f := range fds {
		reapPidfd(ctx, f)
		f.Close()
	}
}

// orphanLists coalesces reapOrphansIn's lists of children: a caller waits
// for the next list to begin after it came, which every caller that came
// while one was being made shares.
var orphanLists struct {
	mu      sync.Mutex
	running bool        // makeOrphanLists runs
	next    *orphanList // the list the callers that came since the last one began wait for
}

type orphanList struct {
	done chan struct{}
	pids []int // the unclaimed children when it was made
}

// unclaimedChildren lists this process's children not claimed by a
// supervisor's reaping, in a list begun after the call.
func unclaimedChildren() []int {
	orphanLists.mu.Lock()
	l := orphanLists.next
	if l == nil {
		l = &orphanList{done: make(chan struct{})}
		orphanLists.next = l
	}
	if !orphanLists.running {
		orphanLists.running = true
		go makeOrphanLists()
	}
	orphanLists.mu.Unlock()
	<-l.done
	return l.pids
}

// makeOrphanLists makes the lists callers wait for, one after the other,
// until none is waited for.
func makeOrphanLists() {
	for {
		orphanLists.mu.Lock()
		l := orphanLists.next
		orphanLists.next = nil
		if l == nil {
			orphanLists.running = false
			orphanLists.mu.Unlock()
			return
		}
		orphanLists.mu.Unlock()
		spawnMu.Lock()
		for _, pid := range childPids() {
			if !isClaimed(pid) {
				l.pids = append(l.pids, pid)
			}
		}
		spawnMu.Unlock()
		close(l.done)
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

// Supervised processes are reaped without a descriptor each (issue 22:
// a pidfd per live agent ran a daemon of 5,000 agents out of descriptors
// where RLIMIT_NOFILE cannot be raised). The kernel says a child ended
// with SIGCHLD; one goroutine for the whole process (every Supervisor's
// processes are the process's children) takes it, finds the exited
// children with waitid(P_ALL, WNOHANG|WNOWAIT) and reaps those that are
// supervised (watched), each with waitid(P_PID). The first exited child
// the kernel names may be one that is not supervised (an orphan before
// the sweep reaps it, a child of os/exec before its cmd.Wait): it would
// hide the others, so then every watched pid is tried once instead (a
// waitid(P_PID, WNOHANG) each), and the next SIGCHLD looks again.
//
// No pid is ever waited for by two paths: a watched pid is claimed (the
// sweeps skip it) and reaped only here, removed from watched first.
var children struct {
	mu      sync.Mutex
	watched map[int]*Process // supervised and not yet reaped, by pid
	users   int              // open Supervisors: the loop runs while there are some
	kick    chan os.Signal   // SIGCHLD, or a Start that watched a pid
	done    chan struct{}    // closed when the loop returns
	// killing counts the Stops between their cgroup.kill and the end of
	// their own reaping (reapKilled): meanwhile the loop and the orphan
	// sweep leave the exits to them (see holdReaping).
	killing int
	// hidden: the loop stopped at a direct start's trapped child, which
	// may hide an exited one; the next watch kicks the loop again.
	hidden bool
}

// walks counts the reaping loop's waitid(P_ALL) calls (a test's).
var walks atomic.Int64

// holdReaping tells the reaping loop and the orphan sweep that a Stop is
// about to kill a group and will reap its supervised processes itself,
// each by its pid (reapKilled), until the returned release. waitid(P_ALL),
// which the loop and the sweep use to find an exited child, walks every
// child of the daemon to find one: at 5,000 live agents about 2 ms of CPU a
// call, once per exit of a cascade's thousand (issue 22's scale rows: the
// cost of a cascade grew with the live agents beside it). A
// waitid(P_PID) costs the same at any number. Other exits meanwhile are
// reaped once release kicks the loop (a kill and its wait, bounded by the
// Stop's deadline).
func holdReaping() (release func()) {
	children.mu.Lock()
	children.killing++
	children.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			children.mu.Lock()
			children.killing--
			if children.killing == 0 && children.kick != nil {
				select {
				case children.kick <- syscall.SIGCHLD: // look for what exited meanwhile
				default:
				}
			}
			children.mu.Unlock()
		})
	}
}

// HoldReaping holds the reaping loop, as a Stop does from its kill
// (holdReaping), until release: the processes that exit meanwhile are
// reaped once it is called. A shutdown holds it while it sends its agents
// SIGTERM: each exit reaped was the loop's work, taking the CPU from the
// signals of the subtrees not yet signalled. A Stop that waits for a
// process it did not kill to be reaped waits for release: the caller
// bounds the hold.
func (s *Supervisor) HoldReaping() (release func()) { return holdReaping() }

// reapingHeld reports whether a Stop holds the reaping (holdReaping).
func reapingHeld() bool {
	children.mu.Lock()
	defer children.mu.Unlock()
	return children.killing > 0
}

// reapKilled reaps those of procs that are still watched, each by its pid
// (constant time, unlike the loop's waitid(P_ALL)): the Stop that holds
// the reaping emptied their group, so they have exited. One that is not
// yet reapable (the kernel reports a group empty a moment before its last
// processes are zombies) stays watched, for the loop, which the release
// kicks: reapExited looking past every process that still runs.
func (s *Supervisor) reapKilled(procs []*Process) {
	s.reapExited(slices.Clone(procs), len(procs))
}

// watchChildren starts the reaping loop for one more Supervisor.
func watchChildren() {
	children.mu.Lock()
	defer children.mu.Unlock()
	children.users++
	if children.users > 1 {
		return
	}
	if children.watched == nil {
		children.watched = map[int]*Process{}
	}
	kick := make(chan os.Signal, 1)
	done := make(chan struct{})
	children.kick, children.done = kick, done
	signal.Notify(kick, syscall.SIGCHLD)
	noChildStopSignals()
	go reapChildren(kick, done)
}

// unwatchChildren stops the loop once the last Supervisor is closed,
// waiting for it to return.
func unwatchChildren() {
	children.mu.Lock()
	children.users--
	if children.users > 0 {
		children.mu.Unlock()
		return
	}
	kick, done := children.kick, children.done
	children.kick, children.done = nil, nil
	children.mu.Unlock()
	signal.Stop(kick)
	close(kick)
	<-done
}

// watch makes p's end reported: from now on the loop reaps it. A process
// that exited before is found at once: a peek at its own pid (a kick would
// walk every child of the daemon), or a kick where the loop stopped at a
// direct start's trapped child since the last watch (it may hide others).
func (s *Supervisor) watch(p *Process) error {
	children.mu.Lock()
	if s.unwatched {
		children.mu.Unlock()
		return ErrClosed
	}
	children.watched[p.Pid] = p
	kick, hidden := children.kick, children.hidden
	children.hidden = false
	children.mu.Unlock()
	if !hidden {
		var si siginfoChild
		if err := waitid(unix.P_PID, p.Pid, &si, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil); err == nil && si.Pid == 0 {
			return nil // running: its exit's SIGCHLD kicks the loop
		}
	}
	select {
	case kick <- syscall.SIGCHLD:
	default: // a look is due already
	}
	return nil
}

// kickChildren makes the loop look again, if it runs.
func kickChildren() {
	children.mu.Lock()
	defer children.mu.Unlock()
	if children.kick == nil {
		return
	}
	select {
	case children.kick <- syscall.SIGCHLD:
	default: // a look is due already
	}
}

// unwatch takes s's processes out of the loop (Close): they are returned,
// not reaped, and marked gone so that Signal leaves their pids alone.
func (s *Supervisor) unwatch() []*Process {
	children.mu.Lock()
	s.unwatched = true
	var out []*Process
	for pid, p := range children.watched {
		if p.sup == s {
			out = append(out, p)
			delete(children.watched, pid)
		}
	}
	children.mu.Unlock()
	for _, p := range out {
		p.sigMu.Lock()
		p.gone = true
		p.sigMu.Unlock()
	}
	return out
}

// take removes pid from watched: the caller then owns its reaping.
func take(pid int) *Process {
	children.mu.Lock()
	defer children.mu.Unlock()
	p := children.watched[pid]
	if p != nil {
		takeLocked(p)
	}
	return p
}

// takeIf is take for a caller that knows the process it wants: it takes
// pid only while p is the one watched there. A process reaped by another
// path frees its pid, which a later child may have by now (pid_max is
// 32,768 here): that child is not the caller's to take.
func takeIf(p *Process) bool {
	children.mu.Lock()
	defer children.mu.Unlock()
	if children.watched[p.Pid] != p {
		return false
	}
	takeLocked(p)
	return true
}

func takeLocked(p *Process) {
	delete(children.watched, p.Pid)
	p.sup.reaping.Add(1) // Close waits for the reap
}

// reapChildren is the loop: on each kick it reaps every watched child that
// has exited. It returns when kick is closed.
func reapChildren(kick chan os.Signal, done chan struct{}) {
	defer close(done)
	for range kick {
		// While a Stop holds the reaping it reaps what it killed, and its
		// release kicks again.
		for !reapingHeld() {
			var si siginfoChild
			walks.Add(1)
			if err := waitid(unix.P_ALL, 0, &si, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil); err != nil || si.Pid == 0 {
				break // no exited child
			}
			if si.Code == cldTrapped {
				// A direct start's child, stopped before its first
				// instruction (never a watched pid): it hides the
				// others until its starter detaches it and watches it
				// (or, failing, kicks: kickChildren), which kicks this
				// loop again.
				children.mu.Lock()
				children.hidden = true
				children.mu.Unlock()
				break
			}
			p := take(int(si.Pid))
			if p == nil {
				// Not one of ours (yet): it hides the others.
				reapWatched()
				break
			}
			p.sup.reap(p)
		}
	}
}

// reapWatched tries every watched pid once.
func reapWatched() {
	children.mu.Lock()
	pids := make([]int, 0, len(children.watched))
	for pid := range children.watched {
		pids = append(pids, pid)
	}
	children.mu.Unlock()
	for _, pid := range pids {
		var si siginfoChild
		// A peek first, so that a running process stays watched.
		if err := waitid(unix.P_PID, pid, &si, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil); err == nil && si.Pid == 0 {
			continue
		}
		if p := take(pid); p != nil {
			p.sup.reap(p)
		}
	}
}

// reap collects the status of p, which has exited (or was stolen: ECHILD),
// and reports its end; the caller took p from watched.
func (s *Supervisor) reap(p *Process) {
	defer s.reaping.Done()
	var si siginfoChild
	var ru unix.Rusage
	p.sigMu.Lock()
	err := waitid(unix.P_PID, p.Pid, &si, unix.WEXITED|unix.WNOHANG, &ru)
	if err == nil && si.Pid == 0 {
		// Cannot happen (only the loop reaps a watched pid, and it saw it
		// exited); waiting keeps the one path.
		err = waitid(unix.P_PID, p.Pid, &si, unix.WEXITED, &ru)
	}
	p.gone = true
	p.sigMu.Unlock()
	// err (ECHILD): someone else reaped it; the status is lost.
	s.finishProcess(p, si, ru, err == nil)
}

// reapDyingMin is the fewest processes for which a kill's reaping starts
// with the kill (reapDying): below it, their reaping once the group is
// empty (reapKilled) is short, and a shutdown's hundreds of small stops
// would each be woken by every exit of all of them.
const reapDyingMin = 64

// reapDyingWindow is how many processes not yet exited reapDying looks
// past, in the kill's order, at each wake: the kill ends them in about
// that order, not exactly (two CPUs).
const reapDyingWindow = 8

// reapDying reaps procs, whose group a cgroup.kill is about to empty,
// while they die, instead of all of them once the group is empty: a kill
// ends a thousand processes over a tenth of a second and more, and their
// reaping (34-73 ms for 1,110 once the group was empty: the kernel's
// release of each task, its /proc entries dropped among others) then runs
// beside their exits rather than after the last one. It reaps them in the
// order the kill reaches them (the pre-order of their groups, Cgroup),
// each once the kernel says it has exited (waitid WNOWAIT), woken by
// SIGCHLD, and stops at the returned stop, which waits for it: the ones
// it did not reach are reapKilled's. Only for reapDyingMin processes and
// more.
func (s *Supervisor) reapDying(procs []*Process) (stop func()) {
	if len(procs) < reapDyingMin {
		return func() {}
	}
	left := slices.Clone(procs)
	slices.SortFunc(left, func(a, b *Process) int { return comparePreorder(a.Cgroup, b.Cgroup) })
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGCHLD) // before the kill: no exit goes unheard
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		defer signal.Stop(sigs)
		for {
			left = s.reapExited(left, reapDyingWindow)
			if len(left) == 0 {
				return
			}
			select {
			case <-sigs:
			case <-quit:
				return
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(quit) })
		<-done
	}
}

// reapExited reaps, in order, those of left that have exited, looking
// past at most window that have not, and returns the rest (in left's
// array).
func (s *Supervisor) reapExited(left []*Process, window int) []*Process {
	running := 0
	keep := left[:0]
	for i, p := range left {
		if running == window {
			return append(keep, left[i:]...)
		}
		if isDone(p) {
			continue // reaped by another path (its pid may be another child's now)
		}
		var si siginfoChild
		if err := waitid(unix.P_PID, p.Pid, &si, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil); err == nil && si.Pid == 0 {
			running++
			keep = append(keep, p)
			continue
		}
		// Exited (or being reaped by another path: then not watched).
		if takeIf(p) {
			s.reap(p)
		}
	}
	return keep
}

// comparePreorder orders group paths as the kernel walks a subtree
// (css_for_each_descendant_pre): a group before the groups in it, and
// sibling groups in the order they were made, which for kin's names
// ("a" and the agent's id) is their ids' order: a shorter name first.
func comparePreorder(a, b string) int {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	if i == len(a) && i == len(b) {
		return 0
	}
	// The first component that differs, or that one of them ends in.
	j := strings.LastIndexByte(a[:i], '/') + 1
	ac, bc := a[j:], b[j:]
	if k := strings.IndexByte(ac, '/'); k >= 0 {
		ac = ac[:k]
	}
	if k := strings.IndexByte(bc, '/'); k >= 0 {
		bc = bc[:k]
	}
	if ac == bc { // one holds the other: it comes first
		return cmp.Compare(len(a), len(b))
	}
	return cmp.Or(cmp.Compare(len(ac), len(bc)), strings.Compare(ac, bc))
}
