// Package cgroup is the small cgroup v2 file interface the supervisor uses:
// finding the cgroup2 mount from /proc/self/mountinfo, mapping a process to
// its cgroup directory, cgroup.kill, cgroup.freeze, cgroup.procs, waiting on
// cgroup.events through inotify, and removing a tree of groups bottom-up.
//
// It holds no state and starts no goroutines. It never writes cgroup.procs:
// processes enter a group only at clone time (SysProcAttr.UseCgroupFD), which
// is race-free; moving a running process is racy and slow (PLATFORM.md).
package cgroup
