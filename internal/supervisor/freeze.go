package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/kin-agents/kin/internal/supervisor/cgroup"
	"github.com/kin-agents/kin/kin"
)

// Freeze suspends agent id. With subtree false it freezes only the agent's
// own processes (cgroup.freeze of <group>/self): its child agents keep
// running (seed 000's "suspend X"). With subtree true it freezes <group>,
// that is the agent and every agent nested in it ("suspend X --cascade"),
// and returns once every group below reports "frozen 1". With process
// groups it sends SIGSTOP to the same processes until every one of them
// shows as stopped.
func (s *Supervisor) Freeze(ctx context.Context, id kin.AgentID, subtree bool) error {
	a, err := s.lookup(id)
	if err != nil {
		return err
	}
	end, err := s.beginFreeze(ctx, a, subtree)
	if err != nil {
		return fmt.Errorf("supervisor: freeze agent %d: %w", id, err)
	}
	defer end()
	if s.cg {
		dir := a.path
		if !subtree {
			dir = selfDir(a.path)
			// Every group gets its leaf when made or adopted; make it
			// anyway, so that the freeze covers a process started later.
			if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("supervisor: freeze agent %d: %w", id, err)
			}
		}
		if err := cgroup.Freeze(ctx, dir); err != nil {
			return fmt.Errorf("supervisor: freeze agent %d: %w", id, err)
		}
		return nil
	}
	s.mu.Lock()
	if subtree {
		a.freezeSubtree = true
	} else {
		a.freezeSelf = true
	}
	ids, procs := s.targetsLocked(a, subtree)
	s.mu.Unlock()
	err = waitUntil(ctx, func() bool {
		all := true
		for _, pid := range s.scanTargets(ids, procs) {
			if st, err := readStat(pid); err == nil && !stopped(st) {
				all = false
				signalPid(pid, unix.SIGSTOP)
			}
		}
		return all
	})
	if err != nil {
		return fmt.Errorf("supervisor: freeze agent %d: %w", id, err)
	}
	return nil
}

// Thaw undoes Freeze. With subtree false it thaws the agent's own processes
// only, and fails with ErrInFrozenSubtree when they would stay frozen: the
// agent's own group or an enclosing agent's is frozen with Freeze(subtree
// true). With subtree true it clears every freeze in the subtree (the
// group's, and each self leaf's and nested group's, however they were
// frozen), so that all of it ends thawed; it fails with ErrInFrozenSubtree
// when an enclosing agent's subtree freeze holds. It returns once
// cgroup.events says "frozen 0" throughout (with process groups, once no
// process of the set shows as stopped after SIGCONT).
func (s *Supervisor) Thaw(ctx context.Context, id kin.AgentID, subtree bool) error {
	a, err := s.lookup(id)
	if err != nil {
		return err
	}
	if s.cg {
		if subtree {
			err = cgroup.ThawTree(ctx, a.path, s.mount.Dir)
		} else {
			err = cgroup.Thaw(ctx, selfDir(a.path), s.mount.Dir)
		}
		var fe *cgroup.FrozenError
		if errors.As(err, &fe) && !fe.Below {
			s.mu.Lock()
			holder := s.paths[fe.Dir]
			s.mu.Unlock()
			return s.inFrozenSubtree(id, holder, fe.Dir)
		}
		if err != nil {
			return fmt.Errorf("supervisor: thaw agent %d: %w", id, err)
		}
		return nil
	}
	s.mu.Lock()
	if holder := s.subtreeFreezeLocked(a, !subtree); holder != nil {
		s.mu.Unlock()
		return s.inFrozenSubtree(id, holder, holder.path)
	}
	if subtree {
		for _, b := range s.subtreeLocked(a) {
			b.freezeSelf, b.freezeSubtree = false, false
		}
	} else {
		a.freezeSelf = false
	}
	ids, procs := s.targetsLocked(a, subtree)
	s.mu.Unlock()
	err = waitUntil(ctx, func() bool {
		none := true
		for _, pid := range s.scanTargets(ids, procs) {
			if st, err := readStat(pid); err == nil && st.state == 'T' {
				none = false
				signalPid(pid, unix.SIGCONT)
			}
		}
		return none
	})
	if err != nil {
		return fmt.Errorf("supervisor: thaw agent %d: %w", id, err)
	}
	return nil
}

func (s *Supervisor) inFrozenSubtree(id kin.AgentID, holder *agent, dir string) error {
	switch {
	case holder == nil:
		return fmt.Errorf("supervisor: thaw agent %d: %w: cgroup %s is frozen", id, ErrInFrozenSubtree, dir)
	case holder.id == id:
		return fmt.Errorf("supervisor: thaw agent %d: %w: its own subtree is frozen (thaw it with subtree)", id, ErrInFrozenSubtree)
	}
	return fmt.Errorf("supervisor: thaw agent %d: %w: enclosing agent %d's subtree is frozen (thaw agent %d with subtree)", id, ErrInFrozenSubtree, holder.id, holder.id)
}

// Frozen reports agent id's freezer state. self: a Freeze of this agent
// (of its own processes or of its subtree) is in force, so a Thaw of it is
// what resumes it. effective: its own processes are frozen now, by its own
// Freeze or by an enclosing agent's subtree Freeze (cgroup.events of its
// self leaf says "frozen 1"; with process groups, a freeze covers it and all
// its processes show as stopped). Right after a Freeze is asked for, self
// may be true before effective is.
func (s *Supervisor) Frozen(id kin.AgentID) (self bool, effective bool, err error) {
	a, err := s.lookup(id)
	if err != nil {
		return false, false, err
	}
	st, err := s.freezeState(a, nil)
	return st.SelfFrozen, st.Frozen, err
}

// freezeState fills Group's freezer fields for a. With process groups,
// pids are the agent's own live processes (nil: scan for them).
func (s *Supervisor) freezeState(a *agent, pids []int) (Group, error) {
	if s.cg {
		g, err := cgroupFreezeState(a.path)
		if err != nil {
			err = fmt.Errorf("supervisor: agent %d: %w", a.id, err)
		}
		return g, err
	}
	var g Group
	s.mu.Lock()
	g.SubtreeFrozen = a.freezeSubtree
	g.SelfFrozen = a.freezeSelf || a.freezeSubtree
	covered := g.SelfFrozen || s.subtreeFreezeLocked(a, false) != nil
	var procs []*Process
	if a.proc != nil && !isDone(a.proc) {
		procs = append(procs, a.proc)
	}
	s.mu.Unlock()
	if covered && pids == nil {
		pids = s.scanTargets(map[kin.AgentID]bool{a.id: true}, procs)
	}
	g.Frozen = covered
	for _, pid := range pids {
		if st, err := readStat(pid); err == nil && st.alive() && !stopped(st) {
			g.Frozen = false
		}
	}
	return g, nil
}

// cgroupFreezeState reads the freezer fields of Group for the agent group
// dir.
func cgroupFreezeState(dir string) (Group, error) {
	var g Group
	self := selfDir(dir)
	ownOn, err1 := cgroup.FreezeSet(self)
	treeOn, err2 := cgroup.FreezeSet(dir)
	ev, err3 := cgroup.ReadEvents(self)
	g.SubtreeFrozen, g.SelfFrozen, g.Frozen = treeOn, ownOn || treeOn, ev.Frozen
	return g, errors.Join(err1, err2, err3)
}

func stopped(st procStat) bool { return st.state == 'T' || st.state == 't' }

// subtreeFreezeLocked (process groups) returns the nearest record whose
// subtree freeze covers a: a itself when withSelf, else or then the
// enclosing records; nil when none does.
func (s *Supervisor) subtreeFreezeLocked(a *agent, withSelf bool) *agent {
	if withSelf && a.freezeSubtree {
		return a
	}
	for d := filepath.Dir(a.path); within(d, s.root) && d != s.root; d = filepath.Dir(d) {
		if b := s.paths[d]; b != nil && b.freezeSubtree {
			return b
		}
	}
	return nil
}

// freezeBlocksLocked reports whether Start must refuse a process for a: a
// Freeze covering it is in progress or, with process groups, in force
// (spawn reads cgroup.freeze for the rest).
func (s *Supervisor) freezeBlocksLocked(a *agent) bool {
	if a.freezingSelf > 0 || a.freezingTree > 0 || !s.cg && (a.freezeSelf || a.freezeSubtree) {
		return true
	}
	for d := filepath.Dir(a.path); within(d, s.root) && d != s.root; d = filepath.Dir(d) {
		if b := s.paths[d]; b != nil && (b.freezingTree > 0 || !s.cg && b.freezeSubtree) {
			return true
		}
	}
	return false
}

// frozenDir returns leaf if its own cgroup.freeze is set, else its nearest
// ancestor below stopAt whose cgroup.freeze is set, else "".
func frozenDir(leaf, stopAt string) string {
	// One read, not one per ancestor, where nothing is frozen (every
	// spawn): an empty group says "frozen 1" as soon as it or any
	// ancestor has cgroup.freeze set (the kernel passes a freeze down to
	// every descendant at the write, and to a group made under a frozen
	// one at its mkdir).
	if ev, err := cgroup.ReadEvents(leaf); err == nil && !ev.Populated && !ev.Frozen {
		return ""
	}
	if on, err := cgroup.FreezeSet(leaf); err == nil && on {
		return leaf
	}
	return cgroup.FrozenAncestor(leaf, stopAt)
}

// beginFreeze registers a Freeze of a (or of its subtree) with Start and
// waits for the Starts in flight that it covers to finish forking. The
// returned func ends the registration.
func (s *Supervisor) beginFreeze(ctx context.Context, a *agent, subtree bool) (func(), error) {
	s.mayBeFrozen.Store(true)
	s.mu.Lock()
	set := []*agent{a}
	if subtree {
		a.freezingTree++
		set = s.subtreeLocked(a)
	} else {
		a.freezingSelf++
	}
	var starting []chan struct{}
	for _, b := range set {
		if b.starting != nil {
			starting = append(starting, b.starting)
		}
	}
	s.mu.Unlock()
	end := func() {
		s.mu.Lock()
		if subtree {
			a.freezingTree--
		} else {
			a.freezingSelf--
		}
		s.mu.Unlock()
	}
	for _, ch := range starting {
		select {
		case <-ch:
		case <-ctx.Done():
			end()
			return nil, ctx.Err()
		}
	}
	return end, nil
}

func (s *Supervisor) lookup(id kin.AgentID) (*agent, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	a := s.agents[id]
	if a == nil {
		return nil, fmt.Errorf("%w %d", ErrUnknownAgent, id)
	}
	return a, nil
}

// targetsLocked is scanTargets' input for a's own processes, or for its
// whole subtree's.
func (s *Supervisor) targetsLocked(a *agent, subtree bool) (map[kin.AgentID]bool, []*Process) {
	set := []*agent{a}
	if subtree {
		set = s.subtreeLocked(a)
	}
	ids := map[kin.AgentID]bool{}
	var procs []*Process
	for _, b := range set {
		ids[b.id] = true
		if b.proc != nil && !isDone(b.proc) {
			procs = append(procs, b.proc)
		}
	}
	return ids, procs
}
