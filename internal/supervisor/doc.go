// Package supervisor runs agent processes: it starts each in its own
// cgroup nested under its parent agent's, waits for it, freezes and thaws
// an agent alone or its whole subtree, kills whole subtrees, and tells which
// agent a pid belongs to. It owns the daemon's child processes and their
// reaping; it must never import the daemon, the store or the HTTP API,
// never park an OS thread per child, and never move a running process
// between cgroups (no cgroup.procs writes). Package cgroup below it holds
// the cgroup v2 file operations.
//
// # Containment
//
// New finds the cgroup2 mount in /proc/self/mountinfo (on this hybrid host
// /sys/fs/cgroup/unified; never assumed) and creates the kin root group,
// Config.Name (default "kin-<pid>"), under the daemon's own cgroup: that is
// the subtree systemd delegates with Delegate=yes, and it keeps the root
// out of other services' way. If that mkdir fails it tries the top of the
// mount. Here the daemon runs in the root cgroup, so the kin root is
// /sys/fs/cgroup/unified/kin-<pid>. Containment() then says "cgroup2".
// Without a writable cgroup2 (or without cgroup.kill, Linux 5.14) it says
// "process-groups" and ContainmentReason says why.
//
// The root carries the extended attribute user.kin.root, the owning
// daemon's home. A daemon whose own cgroup lies under such a root (it runs
// as another daemon's agent) does not make its root there but at the top
// of the mount, so that the roots of two daemons never nest.
//
// # Layout
//
// Agent groups are <root>/a<id>, and a child's is <parent's group>/a<id>,
// so a Stop of the parent's group reaches every descendant. An agent's own
// processes do not live in its group but in the leaf <group>/self beside
// its children's groups:
//
//	<root>/a7/self       agent 7's processes
//	<root>/a7/a12/self   agent 12's (a child of 7)
//	<root>/a7/a13/...    another child's group
//
// The reason is the freezer: cgroup.freeze is hierarchical, so freezing
// a7 freezes everything below it. Seed 000 needs both "suspend X" (X's own
// processes stop, its children keep running: freeze a7/self) and "suspend X
// --cascade" (the whole subtree: freeze a7); with X's processes directly in
// a7 the first could not be expressed. Kill needs the opposite, the whole
// subtree, and gets it from one cgroup.kill at a7. As a bonus, processes sit
// only in leaves, so the layout obeys cgroup v2's "no internal processes"
// rule, which would bind as soon as a controller (memory, pids) is enabled
// for a group's children; kin enables none today.
//
// Every group gets its self leaf when it is made (Start, or the empty
// group of a parent the supervisor does not know) or adopted. An agent's
// own processes are those in its leaf or below it (sub-cgroups of the leaf,
// which an agent could only make with delegation): Group.Pids,
// PeerInCgroup and AgentOfPID use that, and AgentOfPID counts only groups
// the supervisor made or adopted, so a directory made by someone else,
// named like a group or a leaf, attributes nothing. Discover skips leaves
// and everything in them. Detached agents, and agents whose parent the
// supervisor does not know, get groups at the root (the unknown parent gets
// an empty group there, in which its children nest).
//
// # Starting
//
// Start creates the group and its self leaf and forks with
// SysProcAttr.UseCgroupFD (clone3 CLONE_INTO_CGROUP) into the leaf, so the
// process is in its leaf from its first instruction, with Setpgid so it
// never shares the daemon's process group (terminal signals, the
// fallback), from a thread with a descriptor table of its own
// (sandbox.ForkFromOwnTable, Direct.Start: a fork copies its caller's
// table, a few descriptors per live agent). No pidfd is kept per process:
// one reaping loop waits for them all (reap.go). The
// daemon is a child subreaper (PR_SET_CHILD_SUBREAPER, set by New for the
// whole process and never undone): processes that double-fork re-parent to
// it instead of init, and they stay in the agent's leaf.
//
// Start refuses (ErrFrozen) to run a process that a freeze covers: clone3
// into a frozen group freezes the child before its exec, and Go's ForkExec
// waits for that exec, so Start would hang (holding the lock the orphan
// sweep needs). Freeze registers itself with Start before writing
// cgroup.freeze and waits for the Starts in flight that it covers to finish
// forking; Start checks the registrations and, once marked as starting, the
// cgroup.freeze files of the leaf and its ancestors. A freeze written by
// someone else behind kin's back can still hang a Start.
//
// # Reaping: one path per pid
//
// A supervised process is reaped only by one reaping goroutine for the
// whole process (every Supervisor's processes are its children), which
// holds no descriptor per process: on SIGCHLD it asks the kernel for the
// exited children (waitid(P_ALL, WNOHANG|WNOWAIT)) and reaps the
// supervised ones with waitid(P_PID, WNOHANG); when the first exited child
// the kernel names is not supervised (an orphan the sweep has not reaped
// yet, a child of os/exec before its cmd.Wait), it tries every supervised
// pid once instead. 200 children cost no goroutine, no thread and no
// descriptor each (TestNoThreadPerChild, TestNoGoroutinePerChild,
// TestNoDescriptorPerChild). Signals go by pid (Process.Signal says why
// that cannot hit a recycled pid). Nothing calls cmd.Wait or wait4(-1).
//
// Orphans (an agent's descendants that re-parented to the daemon) are
// reaped by a sweep on SIGCHLD, designed not to steal any status:
//
//   - supervised pids are "claimed" in a process-wide set from fork until
//     after the reaping goroutine reaped them, and the sweep skips them;
//   - Start holds a process-wide lock shared from fork until the claim, and
//     the sweep holds it exclusively, so it never sees an unclaimed pid that
//     is in fact a supervised process just forked;
//   - the sweep lists the daemon's children from /proc/self/task/*/children,
//     peeks at each unclaimed one with waitid(P_PID, WNOWAIT), and reaps an
//     exited one only if it is one of this supervisor's orphans: with cgroup2
//     its group (still readable for a zombie) is under the kin root, so
//     children that os/exec starts elsewhere in the daemon, in the daemon's
//     own group, keep their status for their cmd.Wait (TestOrphanReaped).
//
// Stop also reaps the orphans of the subtree it killed before returning:
// once the group is empty it pidfd_opens every unclaimed child in it (under
// the exclusive lock, so the pids cannot be recycled), waits for each in the
// netpoller and reaps it. An orphan whose re-parenting races with the kill
// is reaped moments later by the SIGCHLD sweep.
//
// # Stopping, freezing
//
// Stop(id, grace): SIGTERM and SIGCONT to every process of the subtree
// (each through a pidfd opened for it, after checking the pid is still in the subtree;
// frozen groups are thawed first so the signal can be handled), up to grace
// for cgroup.events to say "populated 0", then "1" into cgroup.kill at the
// subtree's root, which kills processes that double-forked, called setsid,
// changed process group, ignore SIGTERM or are frozen. It waits for
// "populated 0" (inotify on cgroup.events through the netpoller, with a
// short polling backoff as a safety net and as the fallback when inotify
// instances run out), for every supervised process to be reaped, then
// removes the groups, self leaves included, children first (from its
// records, one rmdir per directory without reading any; it walks the tree
// only when directories it did not make are left). Starts into a
// subtree being stopped are refused (ErrStopping); Starts already forking
// finish first and are killed with it.
//
// Freeze(id, false) writes cgroup.freeze of <group>/self only: the agent's
// own processes freeze, its children run on. Freeze(id, true) writes it at
// <group>, which freezes the subtree. Both return only once cgroup.events
// says "frozen 1" in the group written and in every group below it: on this
// kernel a group reports frozen once its own processes are, possibly before
// its nested groups' are. Thaw(id, false) clears <group>/self; it fails with
// ErrInFrozenSubtree, changing nothing, when <group> or an enclosing group
// is frozen itself (its processes would stay frozen). Thaw(id, true) clears
// cgroup.freeze in <group> and in every group and leaf below it, so that a
// subtree frozen by any mix of single and subtree freezes ends thawed.
// Frozen and Group report both the setting (SelfFrozen, SubtreeFrozen) and
// the effective state of the agent's own processes (cgroup.events of its
// leaf), which an enclosing subtree freeze sets too.
//
// # Fallback: process groups
//
// Without cgroup2 every agent leads its own process group and carries
// EnvMarker in its environment. A subtree's processes are found in /proc:
// supervised processes, members of the groups they lead, processes with the
// marker (which finds setsid'd orphans) and every descendant of those; they
// get SIGTERM, then SIGKILL in rounds until none is left. Orphans are reaped
// by the same sweep, which there reaps exited unclaimed children outside the
// daemon's own process group. Freeze is SIGSTOP until all show state T: with
// subtree false to the agent's own processes (its supervised process, its
// process group, processes carrying its marker and their descendants; child
// agents lead their own groups and carry their own marker), with subtree
// true to the whole subtree's; Thaw is SIGCONT to the same sets. The
// supervisor keeps the freeze settings in memory to answer Frozen, refuse
// Thaw(id, false) inside a frozen subtree and refuse Starts, as with
// cgroup2; a process that gets SIGCONT from elsewhere runs again.
// Limits: a process that leaves its group and clears its environment before
// its parent dies escapes; the daemon must not start other children with
// Setpgid or Setsid through os/exec (the sweep would reap them); Discover and
// Adopt need cgroups.
//
// # Other limits
//
// Because the daemon is a subreaper, a grandchild that a child started by
// os/exec (outside the supervisor) leaves behind re-parents to the daemon
// and stays a zombie: run such commands through the supervisor. AgentOfPID
// reads /proc/<pid>/cgroup, so check a socket peer's pid while it is still
// connected. The waitid siginfo layout assumes 64-bit Linux other than MIPS.
//
// # Restart
//
// Close kills everything (after Config.CloseGrace) and removes the kin root;
// with Config.KeepOnClose it leaves processes and groups in place (the root
// is removed all the same when no process runs under it). A
// restarted daemon with the same Config.Name finds the old groups with
// Discover and takes them over with Adopt (a path from an earlier root also
// works): Stop, Freeze, Group and AgentOfPID then work on them, though their
// exit statuses, no longer the daemon's children's, are not collected. Freeze
// settings live in the groups' cgroup.freeze files, so they survive the
// restart and Frozen reports them.
package supervisor
