package supervisor

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/kin-agents/kin/kin"
)

// PID namespaces: the containment of a daemon that has no writable cgroup
// v2 (an ordinary user outside a delegated subtree) but may make user and
// PID namespaces, as unprivileged users can on most current distributions.
//
// Each agent's process is cloned into a new user namespace (mapping only
// the agent's own uid and gid, to themselves: files keep their owners, and
// the process has no capability outside the namespace) and a new PID
// namespace, of which it is pid 1. kin runs its own small init there (the
// sandbox shim with Spec.Init). What that gives, from the kernel:
//
//   - when the init dies, the kernel SIGKILLs every other process of the
//     namespace, and of namespaces nested in it, before the init's exit
//     completes: a setsid'd, env -i'd, TERM-ignoring grandchild cannot
//     outlive its agent, and once the daemon has reaped the init the
//     namespace is empty;
//   - no process can leave its PID namespace, so the namespace says exactly
//     which agent a process belongs to (AgentOfPID), for the socket peer
//     checks and for freezing a subtree (scanTargets).
//
// Namespaces are not nested like the lineage (a child agent's namespace is
// a sibling of its parent's): the daemon clones every init itself, and a
// process with threads (the daemon) cannot enter another user namespace to
// clone into it. Cascades stay the daemon's: Stop sends SIGTERM and SIGCONT
// to the subtree's inits, which pass them to every process of their
// namespaces, and after the grace SIGKILLs the inits, which takes their
// namespaces with them (nsInits).

// ContainmentPIDNamespaces is the containment described above.
const ContainmentPIDNamespaces = "pid-namespaces"

// StatusFDEnv is the variable naming the descriptor on which an agent's
// init writes its child's wait status (4 bytes, little-endian) before it
// exits; the sandbox shim's init honours it (sandbox.StatusFDEnv, the same
// string: a test in the daemon checks that).
const StatusFDEnv = "KIN_INIT_STATUS_FD"

// probePIDNamespaces reports whether this process may clone a child into a
// new user and PID namespace.
func probePIDNamespaces() error {
	return probeNamespaces(syscall.CLONE_NEWUSER|syscall.CLONE_NEWPID, "a user and PID namespace")
}

// probeUserNamespaces reports whether this process may clone a child into
// a new user namespace.
func probeUserNamespaces() error {
	return probeNamespaces(syscall.CLONE_NEWUSER, "a user namespace")
}

// probeNamespaces clones a child into new namespaces (flags, its uid and
// gid mapped to themselves) that execs a path that does not exist, so the
// clone succeeds and the exec fails (ENOENT), and Go reaps it.
func probeNamespaces(flags uintptr, what string) error {
	uid, gid := os.Geteuid(), os.Getegid()
	_, err := syscall.ForkExec("/nonexistent/kin-probe-namespaces", []string{"kin-probe"}, &syscall.ProcAttr{
		Sys: &syscall.SysProcAttr{
			Cloneflags:  flags,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}},
		},
	})
	if errors.Is(err, syscall.ENOENT) {
		return nil
	}
	if err == nil {
		return errors.New("probe unexpectedly ran")
	}
	return fmt.Errorf("cannot create %s (%v): unprivileged user namespaces may be disabled (sysctl kernel.unprivileged_userns_clone, user.max_user_namespaces, or an AppArmor/SELinux policy)", what, err)
}

// namespaceAttr sets up the clone of an agent's init: a new user namespace
// mapping the credential's uid and gid (the daemon's own without one) to
// themselves, and a new PID namespace.
func namespaceAttr(sys *syscall.SysProcAttr, cred *syscall.Credential) {
	sys.Cloneflags |= syscall.CLONE_NEWPID
	userNamespaceAttr(sys, cred)
}

// userNamespaceAttr sets up a clone into a new user namespace mapping the
// credential's uid and gid (the daemon's own without one) to themselves.
func userNamespaceAttr(sys *syscall.SysProcAttr, cred *syscall.Credential) {
	uid, gid := os.Geteuid(), os.Getegid()
	if cred != nil {
		uid, gid = int(cred.Uid), int(cred.Gid)
	}
	sys.Cloneflags |= syscall.CLONE_NEWUSER
	sys.UidMappings = []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}}
	sys.GidMappings = []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}}
	if cred != nil && os.Geteuid() == 0 {
		// Root may allow setgroups in the namespace: map the supplementary
		// groups too, so that the credential's setgroups works.
		sys.GidMappingsEnableSetgroups = true
		for _, g := range cred.Groups {
			if int(g) != gid {
				sys.GidMappings = append(sys.GidMappings, syscall.SysProcIDMap{ContainerID: int(g), HostID: int(g), Size: 1})
			}
		}
	} else if cred != nil {
		c := *cred           // the caller's stays as it is
		c.NoSetGroups = true // setgroups is denied in an unprivileged user namespace
		sys.Credential = &c
	}
}

// pidNS is the inode of pid's PID namespace (0 when unreadable).
func pidNS(pid int) uint64 {
	var st unix.Stat_t
	if err := unix.Stat("/proc/"+strconv.Itoa(pid)+"/ns/pid", &st); err != nil {
		return 0
	}
	return st.Ino
}

// nsAncestry is the inodes of pid's PID namespace and of each namespace it
// is nested in, innermost first, up to (not including) the daemon's own.
func nsAncestry(pid int, own uint64) []uint64 {
	fd, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/ns/pid", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	var out []uint64
	for range 33 { // user namespaces nest 32 deep at most
		var st unix.Stat_t
		if unix.Fstat(fd, &st) != nil || st.Ino == own {
			break
		}
		out = append(out, st.Ino)
		parent, err := unix.IoctlRetInt(fd, unix.NS_GET_PARENT)
		unix.Close(fd)
		if err != nil {
			return out
		}
		fd = parent
	}
	unix.Close(fd)
	return out
}

// agentOfNS is AgentOfPID with PID namespaces: the agent whose init holds
// pid's namespace or one it is nested in. contained is true whenever pid
// is in a namespace other than the daemon's, known or not.
func (s *Supervisor) agentOfNS(pid int) (id kin.AgentID, ok, contained bool) {
	chain := nsAncestry(pid, s.ownNS)
	if len(chain) == 0 {
		return 0, false, false // the daemon's own namespace, or pid is gone
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ino := range chain {
		if a := s.byNS[ino]; a != nil {
			return a.id, true, true
		}
	}
	return 0, false, true
}

// Contained reports whether pid runs inside kin's containment, and whose
// agent it is where the supervisor can tell (0 where it cannot): in a group
// under the kin root or in a group the supervisor holds (cgroup2), in a PID
// namespace other than the daemon's (pid-namespaces), or, with process
// groups, where AgentOfPID finds it. The operator socket refuses such peers,
// known or not. One look at /proc per call.
func (s *Supervisor) Contained(pid int) (kin.AgentID, bool) {
	if pid <= 0 {
		return 0, false
	}
	switch {
	case s.cg:
		dir, err := s.mount.DirOfPID(pid)
		if err != nil {
			return 0, false
		}
		id, known := s.agentOfDir(dir)
		return id, known || within(dir, s.root)
	case s.pidns:
		id, _, contained := s.agentOfNS(pid)
		return id, contained
	}
	return s.AgentOfPID(pid)
}

// nsTargets is scanTargets with PID namespaces: every process whose
// namespace is, or is nested in, one of agents ids'.
func (s *Supervisor) nsTargets(ids map[kin.AgentID]bool) []int {
	s.mu.Lock()
	want := map[uint64]bool{}
	for id := range ids {
		if a := s.agents[id]; a != nil && a.ns != 0 {
			want[a.ns] = true
		}
	}
	s.mu.Unlock()
	if len(want) == 0 {
		return nil
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	seen := map[uint64]bool{} // namespaces already placed: in want or not
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == selfPid {
			continue
		}
		ino := pidNS(pid)
		if ino == 0 || ino == s.ownNS {
			continue
		}
		in, known := seen[ino]
		if !known {
			in = want[ino]
			if !in {
				for _, up := range nsAncestry(pid, s.ownNS) {
					if want[up] {
						in = true
						break
					}
				}
			}
			seen[ino] = in
		}
		if in {
			if st, err := readStat(pid); err == nil && st.alive() {
				out = append(out, pid)
			}
		}
	}
	return out
}

// nsInits is what a Stop signals with PID namespaces: the inits of agents
// ids. An init forwards SIGTERM and SIGCONT to every process of its
// namespace, and its death kills all of them (nested namespaces too) before
// the daemon can reap it, so nothing else needs finding; a scan of /proc per
// round, as process groups need, costs a stat of every process on the host.
func (s *Supervisor) nsInits(ids map[kin.AgentID]bool) []int {
	s.mu.Lock()
	var pids []int
	for id := range ids {
		if a := s.agents[id]; a != nil && a.nsInit > 0 {
			pids = append(pids, a.nsInit)
		}
	}
	s.mu.Unlock()
	out := pids[:0]
	for _, pid := range pids {
		if st, err := readStat(pid); err == nil && st.alive() {
			out = append(out, pid)
		}
	}
	return out
}

// readInitStatus reads the wait status an init wrote on its status pipe,
// if it wrote one.
func readInitStatus(r *os.File) (syscall.WaitStatus, bool) {
	if r == nil {
		return 0, false
	}
	var b [4]byte
	fd := int(r.Fd())
	unix.SetNonblock(fd, true)
	n, err := unix.Read(fd, b[:])
	if err != nil || n != 4 {
		return 0, false
	}
	return syscall.WaitStatus(binary.LittleEndian.Uint32(b[:])), true
}

// AdoptProcess takes over, after a daemon restart, an agent whose init pid
// an earlier daemon started in its own PID namespace (containment
// pid-namespaces): pid must be the init (pid 1) of a namespace nested in the
// daemon's, and its environment must say it is agent id's (pids are
// recycled). Stop, Freeze and AgentOfPID then work on it; its exit status
// is not collected (it is no longer the daemon's child).
func (s *Supervisor) AdoptProcess(id, parent kin.AgentID, pid int) error {
	if !s.pidns {
		return ErrUnsupported
	}
	if !nsInit(pid) {
		return fmt.Errorf("supervisor: adopt agent %d: pid %d is not the init of a PID namespace", id, pid)
	}
	env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil || !strings.Contains("\x00"+string(env), "\x00KIN_AGENT_ID="+id.String()+"\x00") {
		return fmt.Errorf("supervisor: adopt agent %d: pid %d is not that agent's", id, pid)
	}
	ino := pidNS(pid)
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.agents[id]
	if a == nil {
		parentPath := s.root
		if p := s.agents[parent]; p != nil && parent != 0 {
			parentPath = p.path
		}
		a = &agent{id: id, path: filepath.Join(parentPath, groupName(id)), adopted: true}
		s.rememberLocked(a)
	}
	a.ns, a.nsInit = ino, pid
	s.byNS[ino] = a
	return nil
}

// nsInit reports whether pid is pid 1 of its own PID namespace (the last
// NSpid field of its status).
func nsInit(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f, ok := strings.CutPrefix(line, "NSpid:"); ok {
			fields := strings.Fields(f)
			return len(fields) > 1 && fields[len(fields)-1] == "1"
		}
	}
	return false
}
