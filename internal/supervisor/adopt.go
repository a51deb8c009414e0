package supervisor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/kin-agents/kin/internal/supervisor/cgroup"
	"github.com/kin-agents/kin/kin"
)

// AgentOfPID returns the agent whose own process pid is. With cgroup2 that
// is the innermost supervised group enclosing pid's cgroup, provided pid is
// in that group's self leaf (or in a sub-cgroup of it, which an agent could
// only make with delegation): <root>/a7/self is agent 7's and
// <root>/a7/a12/self agent 12's. Only supervised groups count, so a
// directory someone else made, named like an agent's group or a self leaf
// (<root>/a7/a99/self for an unknown 99, <root>/a7/x/self), matches no
// agent; nor does a process placed in a group directory itself, outside its
// leaf. With process groups it is a best effort: the supervised process
// itself, the process group it leads, the EnvMarker, then the parent chain.
//
// pid is read from /proc, so check a peer's pid while its socket is still
// connected (SO_PEERCRED); the pid cannot be recycled before the peer
// closes its end.
func (s *Supervisor) AgentOfPID(pid int) (kin.AgentID, bool) {
	if pid <= 0 {
		return 0, false
	}
	if s.cg {
		dir, err := s.mount.DirOfPID(pid)
		if err != nil {
			return 0, false
		}
		return s.agentOfDir(dir)
	}
	if s.pidns {
		id, ok, _ := s.agentOfNS(pid)
		return id, ok
	}
	st, err := readStat(pid)
	if err != nil {
		return 0, false
	}
	s.mu.Lock()
	if p := s.procs[pid]; p != nil {
		s.mu.Unlock()
		return p.ID, true
	}
	if p := s.procs[st.pgid]; p != nil {
		s.mu.Unlock()
		return p.ID, true
	}
	s.mu.Unlock()
	if id, ok := s.markedAgent(pid); ok {
		s.mu.Lock()
		defer s.mu.Unlock()
		_, known := s.agents[id]
		return id, known
	}
	for cur, n := st.ppid, 0; cur > 1 && n < 64; n++ {
		s.mu.Lock()
		p := s.procs[cur]
		s.mu.Unlock()
		if p != nil {
			return p.ID, true
		}
		if cur == selfPid {
			break
		}
		st, err := readStat(cur)
		if err != nil {
			break
		}
		cur = st.ppid
	}
	return 0, false
}

// agentOfDir is AgentOfPID with cgroup2, for a process in cgroup dir.
func (s *Supervisor) agentOfDir(dir string) (kin.AgentID, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for d := dir; within(d, s.mount.Dir) && d != s.mount.Dir; d = filepath.Dir(d) {
		if a := s.paths[d]; a != nil {
			if !within(dir, selfDir(a.path)) {
				return 0, false // in a's group, but not one of a's own
			}
			return a.id, true
		}
	}
	return 0, false
}

// PeerInCgroup reports whether process pid is one of agent id's own
// processes: with cgroup2, whether it is in id's leaf <group>/self (or below
// it), not in a child agent's group nor anywhere else in id's subtree. It is
// the check for a peer on agent id's socket.
func (s *Supervisor) PeerInCgroup(pid int, id kin.AgentID) bool {
	got, ok := s.AgentOfPID(pid)
	return ok && got == id
}

// Group is an agent's group as found on disk.
type Group struct {
	ID kin.AgentID
	// Parent is the agent of the nearest enclosing group, 0 at the root.
	Parent kin.AgentID
	// Path is the cgroup directory ("" with process groups), in which
	// child agents' groups nest; Self (Path/self) is the leaf holding the
	// agent's own processes.
	Path, Self string
	// Pids are the agent's own processes: those in Self and below it, not
	// those of nested agents' groups.
	Pids []int
	// Populated: some process runs in the group or a nested one.
	Populated bool
	// Frozen: the agent's own processes are frozen now, by its own Freeze
	// or by an enclosing agent's subtree Freeze (cgroup.events of Self).
	Frozen bool
	// SelfFrozen: a Freeze of this agent is in force, of its own processes
	// or of its subtree (Self's or Path's cgroup.freeze is 1).
	SelfFrozen bool
	// SubtreeFrozen: Freeze(subtree true) of this agent is in force
	// (Path's cgroup.freeze is 1); Thaw needs subtree true to undo it.
	SubtreeFrozen bool
}

// Group describes agent id's group now.
func (s *Supervisor) Group(id kin.AgentID) (Group, error) {
	s.mu.Lock()
	a := s.agents[id]
	var proc *Process
	if a != nil && a.proc != nil && !isDone(a.proc) {
		proc = a.proc
	}
	s.mu.Unlock()
	if a == nil {
		return Group{}, fmt.Errorf("%w %d", ErrUnknownAgent, id)
	}
	if s.cg {
		return readGroup(id, a.path)
	}
	var procs []*Process
	if proc != nil {
		procs = append(procs, proc)
	}
	g := Group{ID: id, Pids: s.scanTargets(map[kin.AgentID]bool{id: true}, procs)}
	g.Populated = len(g.Pids) > 0
	st, err := s.freezeState(a, g.Pids)
	g.Frozen, g.SelfFrozen, g.SubtreeFrozen = st.Frozen, st.SelfFrozen, st.SubtreeFrozen
	return g, err
}

func readGroup(id kin.AgentID, dir string) (Group, error) {
	g := Group{ID: id, Path: dir, Self: selfDir(dir)}
	for d := filepath.Dir(dir); d != "/" && d != "."; d = filepath.Dir(d) {
		if pid, ok := parseGroupName(filepath.Base(d)); ok {
			g.Parent = pid
			break
		}
	}
	ev, err := cgroup.ReadEvents(dir)
	if err != nil {
		return g, err
	}
	g.Populated = ev.Populated
	st, err := cgroupFreezeState(dir)
	if err != nil {
		return g, err
	}
	g.Frozen, g.SelfFrozen, g.SubtreeFrozen = st.Frozen, st.SelfFrozen, st.SubtreeFrozen
	g.Pids, err = cgroup.ProcsTree(g.Self)
	return g, err
}

// Discover lists the agent groups ("a<id>" directories) under the kin root,
// parents first: after a daemon restart with the same Config.Name, these
// are the previous run's agents, ready to Adopt. Self leaves, and whatever
// lies in them or in directories not named a<id>, are not groups.
func (s *Supervisor) Discover() ([]Group, error) {
	if !s.cg {
		return nil, ErrUnsupported
	}
	var out []Group
	err := cgroup.Walk(s.root, func(d string) error {
		if d == s.root {
			return nil
		}
		id, ok := parseGroupName(filepath.Base(d))
		if !ok {
			return fs.SkipDir
		}
		g, err := readGroup(id, d)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		out = append(out, g)
		return nil
	})
	return out, err
}

// Adopt takes over an existing agent group (from Discover, or any "a<id>"
// directory in the cgroup2 mount, e.g. under an earlier daemon's root, but
// not one inside a self leaf), so that Stop, Freeze, Group and AgentOfPID
// work on it. Its processes are not this daemon's children: their exit
// statuses are not collected, but Stop still kills them and waits for the
// group to empty. The group's own processes are those in its self leaf,
// which Adopt creates if missing.
func (s *Supervisor) Adopt(path string) (Group, error) {
	if !s.cg {
		return Group{}, ErrUnsupported
	}
	path = filepath.Clean(path)
	id, ok := parseGroupName(filepath.Base(path))
	if !ok || !filepath.IsAbs(path) || !within(path, s.mount.Dir) || path == s.mount.Dir {
		return Group{}, fmt.Errorf("supervisor: adopt %s: not an agent group (a<id>) in %s", path, s.mount.Dir)
	}
	for d := filepath.Dir(path); d != s.mount.Dir && within(d, s.mount.Dir); d = filepath.Dir(d) {
		if _, isGroup := parseGroupName(filepath.Base(filepath.Dir(d))); isGroup && filepath.Base(d) == SelfLeaf {
			return Group{}, fmt.Errorf("supervisor: adopt %s: inside the self leaf %s, not an agent group", path, d)
		}
	}
	if _, err := os.Stat(filepath.Join(path, "cgroup.procs")); err != nil {
		return Group{}, fmt.Errorf("supervisor: adopt: %w", err)
	}
	if err := os.Mkdir(selfDir(path), 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return Group{}, fmt.Errorf("supervisor: adopt: %w", err)
	}
	s.mayBeFrozen.Store(true) // an earlier run may have frozen it
	s.mu.Lock()
	switch a := s.agents[id]; {
	case s.closed:
		s.mu.Unlock()
		return Group{}, ErrClosed
	case a != nil && a.path != path:
		s.mu.Unlock()
		return Group{}, fmt.Errorf("supervisor: adopt %s: agent %d already has group %s: %w", path, id, a.path, ErrRunning)
	case a == nil:
		s.rememberLocked(&agent{id: id, path: path, adopted: true})
	}
	s.mu.Unlock()
	return readGroup(id, path)
}
