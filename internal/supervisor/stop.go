package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kin-agents/kin/internal/supervisor/cgroup"
	"github.com/kin-agents/kin/kin"
)

// Stop stops agent id and every agent nested in its group (seed 001:
// parent death cancels owned children): SIGTERM and SIGCONT to every
// process of the subtree, up to grace for them to exit, then cgroup.kill at
// the subtree's root, which no process escapes (double-forked, setsid,
// changed process group, ignoring SIGTERM or frozen). Stop returns once the
// groups are empty, every supervised process in them has been reaped and
// its Exit reported, orphans already re-parented to the daemon have been
// reaped, and the groups are removed (children first). grace 0 kills at
// once. When ctx has no deadline, Config.KillTimeout bounds the wait after
// the kill. A Stop already covering id is waited for instead.
func (s *Supervisor) Stop(ctx context.Context, id kin.AgentID, grace time.Duration) error {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return ErrClosed
	}
	return s.stop(ctx, id, grace)
}

// Kill is Stop with no grace.
func (s *Supervisor) Kill(ctx context.Context, id kin.AgentID) error { return s.Stop(ctx, id, 0) }

// KillAll kills every process of every agent at once and returns without
// waiting: one cgroup.kill at the kin root (and at each adopted group that
// lies outside it), or SIGKILL to every agent's processes (their namespaces'
// inits with PID namespaces) in the fallbacks. Stops in progress see their
// groups empty before their grace ends, then reap, report and return as
// usual: this is what a daemon's shutdown deadline does to what is left.
func (s *Supervisor) KillAll() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	ids := map[kin.AgentID]bool{}
	var procs []*Process
	var outside []string
	for _, a := range s.agents {
		ids[a.id] = true
		if a.proc != nil && !isDone(a.proc) {
			procs = append(procs, a.proc)
		}
		if s.cg && !within(a.path, s.root) && !s.nestedLocked(a) {
			outside = append(outside, a.path)
		}
	}
	s.mu.Unlock()
	if !s.cg {
		for _, pid := range s.stopTargets(ids, procs) {
			signalPid(pid, unix.SIGKILL)
		}
		return nil
	}
	var errs []error
	for _, dir := range append(outside, s.root) {
		if err := cgroup.Kill(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (s *Supervisor) stop(ctx context.Context, id kin.AgentID, grace time.Duration) error {
	s.mu.Lock()
	a := s.agents[id]
	if a == nil {
		s.mu.Unlock()
		return fmt.Errorf("%w %d", ErrUnknownAgent, id)
	}
	if ch := a.stopping; ch != nil {
		s.mu.Unlock()
		select {
		case <-ch:
			s.mu.Lock()
			defer s.mu.Unlock()
			return a.stopErr
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	op := s.beginStopLocked(s.subtreeLocked(a))
	s.mu.Unlock()
	err := s.runStop(ctx, op, a.path, grace)
	if err == nil && a.adopted && s.cg {
		s.removeOldRoot(filepath.Dir(a.path))
	}
	if err != nil {
		err = fmt.Errorf("supervisor: stop agent %d: %w", id, err)
	}
	s.endStop(op, err)
	s.log.Debug("stopped", keyAgent, id, keyCgroup, a.path, keyErr, err)
	return err
}

// stopOp is one Stop (or Close) in progress over a set of records.
type stopOp struct {
	done     chan struct{}
	sub      []*agent
	ids      map[kin.AgentID]bool
	starting []chan struct{} // Starts in flight in the set
	others   []chan struct{} // other Stops already covering part of the set
}

// beginStopLocked marks sub as stopping: Start refuses new processes and
// children in it from now on.
func (s *Supervisor) beginStopLocked(sub []*agent) *stopOp {
	op := &stopOp{done: make(chan struct{}), sub: sub, ids: map[kin.AgentID]bool{}}
	for _, b := range sub {
		if b.stopping == nil {
			b.stopping = op.done
		} else {
			op.others = append(op.others, b.stopping)
		}
		if b.starting != nil {
			op.starting = append(op.starting, b.starting)
		}
		op.ids[b.id] = true
	}
	return op
}

// runStop empties dir's subtree (cgroup2) or op's agents' processes
// (process groups), waits until their supervised processes are reaped and
// removes the groups.
func (s *Supervisor) runStop(ctx context.Context, op *stopOp, dir string, grace time.Duration) error {
	// Starts in flight finish (fork is quick) before the kill, so that none
	// lands in a group after it was killed. Later ones see stopping.
	for _, ch := range op.starting {
		<-ch
	}
	var procs []*Process
	s.mu.Lock()
	for _, b := range op.sub {
		if b.proc != nil && !isDone(b.proc) {
			procs = append(procs, b.proc)
		}
	}
	s.mu.Unlock()

	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, grace+s.killTimeout)
		defer cancel()
	}
	var err error
	if s.cg {
		var release func()
		release, err = s.killCgroup(ctx, op.sub, dir, grace, procs)
		if release != nil {
			if err == nil {
				s.reapKilled(procs) // the group is empty: each by its pid
			}
			release()
		}
	} else {
		err = s.killGroups(ctx, op.ids, procs, grace)
	}
	for _, p := range procs {
		select {
		case <-p.done:
		case <-ctx.Done():
			err = errors.Join(err, fmt.Errorf("agent %d pid %d not reaped: %w", p.ID, p.Pid, ctx.Err()))
		}
	}
	if s.cg && err == nil {
		if s.cfg.DeferRemove && s.deferRemove(ctx, op.sub, dir) {
			// removed in the background
		} else {
			err = removeGroups(op.sub, dir)
		}
	}
	for _, ch := range op.others {
		select {
		case <-ch:
		case <-ctx.Done():
		}
	}
	return err
}

// removeGroups removes dir's subtree, which must be empty: the groups of
// the records in sub that lie in it (each self leaf, then its group),
// deepest first, then dir. That takes one rmdir per directory and no
// directory reads (which would add half again with two directories per
// agent): a directory is read only when its rmdir finds something in it
// (ENOTEMPTY or EBUSY: directories kin did not make), and then only it.
func removeGroups(sub []*agent, dir string) error {
	paths := make([]string, 0, len(sub)+1)
	known := false
	for _, b := range sub {
		if within(b.path, dir) {
			paths = append(paths, b.path)
			known = known || b.path == dir
		}
	}
	if !known {
		paths = append(paths, dir) // the kin root, or an unknown parent group
	}
	byDepth(paths, true)
	var errs []error
	for _, p := range paths {
		if p != dir || known {
			errs = append(errs, removeGroup(selfDir(p)))
		}
		errs = append(errs, removeGroup(p))
	}
	return errors.Join(errs...)
}

// removeGroup removes the empty group dir: one rmdir, or, when dir holds
// groups (ENOTEMPTY, or EBUSY, which cgroupfs answers for child groups),
// cgroup.RemoveTree, which reads it. A group already gone is fine.
func removeGroup(dir string) error {
	switch err := unix.Rmdir(dir); err {
	case nil, unix.ENOENT:
		return nil
	case unix.ENOTEMPTY, unix.EBUSY:
		return cgroup.RemoveTree(dir)
	default:
		return &fs.PathError{Op: "rmdir", Path: dir, Err: err}
	}
}

// deferRemove removes a stopped subtree's empty groups in a goroutine
// that Close waits for, or, when ctx carries a hold (HoldRemovals), once
// it is released; false if the supervisor is closing (remove now).
func (s *Supervisor) deferRemove(ctx context.Context, sub []*agent, dir string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.removing.Add(1)
	remove := func() {
		defer s.removing.Done()
		if err := removeGroups(sub, dir); err != nil {
			s.log.Warn("remove stopped groups", keyCgroup, dir, keyErr, err)
		}
	}
	if h, _ := ctx.Value(holdKey{}).(*removalHold); h != nil && h.add(remove) {
		return true
	}
	go remove()
	return true
}

// HoldRemovals returns ctx carrying a hold on group removals: the groups
// that Stops given the returned context empty (Config.DeferRemove) are
// removed only once release is called (or at Close), in one goroutine.
// A caller whose next step is on its own critical path (a cascade's
// record) keeps the rmdirs, tens of microseconds of kernel CPU each, from
// competing with it. release may be called more than once.
func (s *Supervisor) HoldRemovals(ctx context.Context) (_ context.Context, release func()) {
	h := &removalHold{}
	s.mu.Lock()
	if s.holds == nil {
		s.holds = map[*removalHold]struct{}{}
	}
	s.holds[h] = struct{}{}
	s.mu.Unlock()
	return context.WithValue(ctx, holdKey{}, h), func() {
		s.mu.Lock()
		delete(s.holds, h)
		s.mu.Unlock()
		h.release()
	}
}

// releaseHolds releases every hold not released yet (Close: nothing is
// left in place for a caller that will not come back).
func (s *Supervisor) releaseHolds() {
	s.mu.Lock()
	holds := s.holds
	s.holds = nil
	s.mu.Unlock()
	for h := range holds {
		h.release()
	}
}

type holdKey struct{}

// OnSignalled returns ctx carrying fn, which a Stop given it (with
// cgroup2) calls once it has sent SIGTERM to its subtree's processes,
// before its grace, or found nothing to signal. A shutdown holds back its
// other work until every subtree has heard it (the last SIGTERM is what
// the shutdown's end waits for, a grace after it).
func OnSignalled(ctx context.Context, fn func()) context.Context {
	return context.WithValue(ctx, signalledKey{}, fn)
}

type signalledKey struct{}

// OnEmpty returns ctx carrying fn, which a Stop given it calls once the
// group it killed (cgroup.kill) holds no process, before the last of them
// are reaped: with the ids of the agents whose groups that Stop covers (the
// agent and every agent nested in its group). Every process of theirs has
// left the group by then; the kernel says so a moment before the last of
// them are zombies, so Process.PeekExit tells how most ended, and the
// reaping, which follows, the rest. Not called when the Stop killed nothing
// (a group empty already, or emptied by its SIGTERM within the grace: its
// processes are reaped as they exit), waited for another Stop covering the
// agent, failed, or runs without cgroups.
func OnEmpty(ctx context.Context, fn func(ids []kin.AgentID)) context.Context {
	return context.WithValue(ctx, emptyKey{}, fn)
}

type emptyKey struct{}

// removalHold is the removals deferred under one HoldRemovals.
type removalHold struct {
	mu       sync.Mutex
	pending  []func()
	released bool
}

// add keeps remove for the release; false once released (run it now).
func (h *removalHold) add(remove func()) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.released {
		return false
	}
	h.pending = append(h.pending, remove)
	return true
}

func (h *removalHold) release() {
	h.mu.Lock()
	pending := h.pending
	h.pending, h.released = nil, true
	h.mu.Unlock()
	if len(pending) > 0 {
		go func() {
			for _, remove := range pending {
				remove()
			}
		}()
	}
}

// Gone reports whether agent id's group, and every group nested in it,
// holds no process while a Stop covers it: nothing starts there again, so
// its end may be recorded, and its groups removed (RemoveGone), before that
// Stop's grace is over (a shutdown's children that died of its SIGTERM,
// while their root ignores it). One read of its cgroup.events. False
// without cgroups, for an agent no Stop covers, or one whose process is
// being started.
func (s *Supervisor) Gone(id kin.AgentID) bool {
	s.mu.Lock()
	a := s.agents[id]
	ok := s.cg && a != nil && a.stopping != nil && a.starting == nil
	s.mu.Unlock()
	if !ok {
		return false
	}
	ev, err := cgroup.ReadEvents(a.path)
	return errors.Is(err, fs.ErrNotExist) || err == nil && !ev.Populated
}

// RemoveGone removes the groups of the agents of ids, found Gone, each
// with what is nested in it, deepest first, before the Stop covering them
// is over; that Stop then finds them removed. (A group that holds a
// process is not removed: the kernel refuses, EBUSY.) The caller does not
// remove groups of the same subtree meanwhile (its Stop's removals held
// by HoldRemovals until this returned).
func (s *Supervisor) RemoveGone(ids []kin.AgentID) error {
	if !s.cg {
		return nil
	}
	paths := make([]string, 0, len(ids))
	s.mu.Lock()
	for _, id := range ids {
		if a := s.agents[id]; a != nil && a.stopping != nil {
			paths = append(paths, a.path)
		}
	}
	s.mu.Unlock()
	byDepth(paths, true)
	var errs []error
	for _, p := range paths {
		errs = append(errs, removeGroup(selfDir(p)), removeGroup(p))
	}
	return errors.Join(errs...)
}

// endStop forgets op's records on success and lets a later Stop retry on
// failure.
func (s *Supervisor) endStop(op *stopOp, err error) {
	s.mu.Lock()
	for _, b := range op.sub {
		if b.stopping != op.done {
			continue
		}
		b.stopErr = err
		if err == nil {
			s.forgetLocked(b)
		} else {
			b.stopping = nil
		}
	}
	s.mu.Unlock()
	close(op.done)
}

// removeOldRoot removes the now empty kin root of an earlier daemon run
// that held an adopted group (best effort: it may hold other groups still).
func (s *Supervisor) removeOldRoot(dir string) {
	if dir == s.root || !within(dir, s.mount.Dir) || dir == s.mount.Dir || !strings.HasPrefix(filepath.Base(dir), "kin") {
		return
	}
	s.mu.Lock()
	known := s.paths[dir] != nil
	s.mu.Unlock()
	if !known {
		unix.Rmdir(dir)
	}
}

// killCgroup empties dir's subtree: TERM, grace, cgroup.kill, wait for
// populated 0, reap re-parented orphans. When it killed, it holds the
// reaping loop (holdReaping) from just before the kill: procs, the
// subtree's supervised processes, are reaped as the kill ends them
// (reapDying), and the caller reaps those left (reapKilled) and then
// releases it.
func (s *Supervisor) killCgroup(ctx context.Context, sub []*agent, dir string, grace time.Duration, procs []*Process) (release func(), _ error) {
	signalled, _ := ctx.Value(signalledKey{}).(func())
	if signalled == nil {
		signalled = func() {}
	}
	ev, err := cgroup.ReadEvents(dir)
	if errors.Is(err, fs.ErrNotExist) {
		signalled()
		return nil, nil
	}
	if err != nil {
		signalled()
		return nil, err
	}
	if !ev.Populated || grace <= 0 {
		signalled() // nothing to signal
	}
	if ev.Populated && grace > 0 {
		s.signalTree(sub, dir, true, unix.SIGTERM, unix.SIGCONT)
		signalled()
		gctx, cancel := context.WithTimeout(ctx, grace)
		ev, err = cgroup.WaitEvents(gctx, dir, func(e cgroup.Events) bool { return !e.Populated })
		cancel()
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
	}
	if ev.Populated {
		release = holdReaping()
		stopReaping := s.reapDying(procs)
		if err := cgroup.Kill(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
			stopReaping()
			release()
			return nil, err
		}
		err := cgroup.WaitEmpty(ctx, dir)
		if emptied, _ := ctx.Value(emptyKey{}).(func([]kin.AgentID)); emptied != nil && err == nil {
			ids := make([]kin.AgentID, len(sub))
			for i, b := range sub {
				ids[i] = b.id
			}
			emptied(ids) // its caller's record, beside the reaping of the last exits
		}
		stopReaping()
		if err != nil {
			release()
			return nil, fmt.Errorf("cgroup %s still populated after cgroup.kill: %w", dir, err)
		}
	}
	s.reapOrphansIn(ctx, dir)
	return release, nil
}

// signalTree sends sigs to every process in dir's subtree, each through a
// pidfd opened before checking that the pid is still in the subtree, so a
// recycled pid is never signalled: a group's cgroup.procs is read, a pidfd
// opened for each pid, and the list read again; a pid in both lists names,
// through its pidfd, a process that was in the group after the pidfd was
// opened. (Two reads of the group instead of one of /proc/<pid>/cgroup per
// process: a shutdown signals thousands at once.) With thaw, each group's
// cgroup.freeze is cleared first: a frozen process cannot act on SIGTERM.
// Unless a group may be frozen (mayBeFrozen) that is not read: a third of
// the reads, which a shutdown of 2,000 agents made by the thousand while
// they died. The groups are those the records of sub make (knownGroups),
// unless the kernel counts others there, which a walk of the subtree
// finds: a directory read per group (a fifth of a shutdown's CPU while
// it signalled, issue 22).
func (s *Supervisor) signalTree(sub []*agent, dir string, thaw bool, sigs ...unix.Signal) {
	thaw = thaw && s.mayBeFrozen.Load()
	signal := func(d string) error {
		if thaw {
			if on, err := cgroup.FreezeSet(d); err == nil && on {
				cgroup.SetFreeze(d, false)
			}
		}
		pids, _ := cgroup.Procs(d)
		if len(pids) == 0 {
			return nil
		}
		fds := make(map[int]int, len(pids))
		for _, pid := range pids {
			if fd, err := unix.PidfdOpen(pid, 0); err == nil {
				fds[pid] = fd
			}
		}
		still, _ := cgroup.Procs(d)
		for _, pid := range still {
			if fd, ok := fds[pid]; ok {
				for _, sig := range sigs {
					unix.PidfdSendSignal(fd, sig, nil, 0)
				}
			}
		}
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil
	}
	if dirs, ok := knownGroups(sub, dir); ok {
		for _, d := range dirs {
			signal(d)
		}
		return
	}
	cgroup.Walk(dir, signal)
}

// knownGroups are the groups of dir's subtree that the records of sub
// make, parents first: dir, and each record's group within it with its
// self leaf. ok: as many as the kernel counts there (cgroup.stat's
// nr_descendants), so no directory need be read to find them; not when it
// counts more (a group kin did not make) or fewer. The count cannot tell
// one of them removed and another made in its place: a process there
// misses the SIGTERM, not the kill, which is the subtree's cgroup.kill.
func knownGroups(sub []*agent, dir string) (dirs []string, ok bool) {
	n, err := cgroup.Descendants(dir)
	if err != nil {
		return nil, false
	}
	dirs = append(make([]string, 0, 2*len(sub)+1), dir)
	for _, b := range sub {
		if b.path != dir && within(b.path, dir) {
			dirs = append(dirs, b.path)
		}
		if within(b.path, dir) {
			dirs = append(dirs, selfDir(b.path))
		}
	}
	if len(dirs)-1 != n {
		return nil, false
	}
	byDepth(dirs, false)
	return dirs, true
}

// killGroups is killCgroup for the process-groups fallback: it finds the
// subtree's processes in /proc (see scanTargets) and signals them in rounds
// until none is left, since they may fork between a scan and the signals.
func (s *Supervisor) killGroups(ctx context.Context, ids map[kin.AgentID]bool, procs []*Process, grace time.Duration) error {
	if grace > 0 {
		for _, pid := range s.stopTargets(ids, procs) {
			signalPid(pid, unix.SIGTERM, unix.SIGCONT)
		}
		gctx, cancel := context.WithTimeout(ctx, grace)
		waitUntil(gctx, func() bool { return len(s.stopTargets(ids, procs)) == 0 })
		cancel()
	}
	// Done after two empty scans in a row: one scan can miss a process
	// that is between fork and exec.
	empty := 0
	err := waitUntil(ctx, func() bool {
		t := s.stopTargets(ids, procs)
		for _, pid := range t {
			signalPid(pid, unix.SIGKILL)
		}
		if len(t) > 0 {
			empty = 0
		} else {
			empty++
		}
		return empty >= 2
	})
	s.sweepAll()
	if err != nil {
		return fmt.Errorf("processes of agents still alive after SIGKILL: %w", err)
	}
	return nil
}

// stopTargets are the processes killGroups signals: every process of the
// agents with process groups (scanTargets), their inits with PID
// namespaces (nsInits).
func (s *Supervisor) stopTargets(ids map[kin.AgentID]bool, procs []*Process) []int {
	if s.pidns {
		return s.nsInits(ids)
	}
	return s.scanTargets(ids, procs)
}

func signalPid(pid int, sigs ...unix.Signal) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return
	}
	for _, sig := range sigs {
		unix.PidfdSendSignal(fd, sig, nil, 0)
	}
	unix.Close(fd)
}

// waitUntil polls cond with a backoff from 1 ms to 50 ms until it holds or
// ctx ends (the fallback has no event to wait on).
func waitUntil(ctx context.Context, cond func() bool) error {
	backoff := time.Millisecond
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		if cond() {
			return nil
		}
		t.Reset(backoff)
		select {
		case <-ctx.Done():
			if cond() {
				return nil
			}
			return ctx.Err()
		case <-t.C:
		}
		backoff = min(2*backoff, 50*time.Millisecond)
	}
}

// byDepth sorts group paths by their depth: parents first, or with deepest
// the deepest first (removals: a group goes before its parent).
func byDepth(paths []string, deepest bool) {
	depth := func(p string) int { return strings.Count(p, "/") }
	slices.SortStableFunc(paths, func(a, b string) int {
		if deepest {
			return depth(b) - depth(a)
		}
		return depth(a) - depth(b)
	})
}
