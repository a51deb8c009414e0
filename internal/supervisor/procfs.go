package supervisor

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"strings"

	"github.com/kin-agents/kin/kin"
)

// procStat is the part of /proc/<pid>/stat the supervisor uses.
type procStat struct {
	state byte
	ppid  int
	pgid  int
	sid   int
}

func (st procStat) alive() bool { return st.state != 'Z' && st.state != 'X' && st.state != 'x' }

// ProcessAlive reports whether pid is a process that has not exited: a
// zombie (exited, not yet reaped) still shows its cgroup in /proc, so
// membership alone does not say it runs.
func ProcessAlive(pid int) bool {
	st, err := readStat(pid)
	return err == nil && st.alive()
}

func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	return parseStat(b)
}

// parseStat parses "pid (comm) state ppid pgrp session ..."; comm may hold
// spaces and parentheses, so fields start after the last ')'.
func parseStat(b []byte) (procStat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, errors.New("malformed /proc/<pid>/stat")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 4 || len(f[0]) != 1 {
		return procStat{}, errors.New("malformed /proc/<pid>/stat")
	}
	st := procStat{state: f[0][0]}
	var err1, err2, err3 error
	st.ppid, err1 = strconv.Atoi(f[1])
	st.pgid, err2 = strconv.Atoi(f[2])
	st.sid, err3 = strconv.Atoi(f[3])
	return st, errors.Join(err1, err2, err3)
}

// procTable reads every process's stat.
func procTable() map[int]procStat {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	t := make(map[int]procStat, len(ents))
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := readStat(pid); err == nil {
			t[pid] = st
		}
	}
	return t
}

// markerOf returns the EnvMarker value in pid's initial environment.
func markerOf(pid int) (string, bool) {
	var b []byte
	// A read that races with the process's execve sees the old, torn-down
	// memory and comes back empty: read again.
	for try := 0; try < 3 && len(b) == 0; try++ {
		var err error
		if b, err = os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ"); err != nil {
			return "", false
		}
	}
	prefix := []byte(EnvMarker + "=")
	for _, kv := range bytes.Split(b, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, prefix); ok {
			return string(v), true
		}
	}
	return "", false
}

// markedAgent parses a marker of this supervisor into an agent id.
func (s *Supervisor) markedAgent(pid int) (kin.AgentID, bool) {
	v, ok := markerOf(pid)
	if !ok {
		return 0, false
	}
	name, idStr, ok := strings.Cut(v, "/")
	if !ok || name != s.cfg.Name {
		return 0, false
	}
	id, err := kin.ParseAgentID(idStr)
	return id, err == nil
}

// scanTargets lists the live processes of agents ids for the
// process-groups fallback: their supervised processes, members of the
// process groups those lead, processes carrying the agents' EnvMarker
// (which finds double-forked, setsid orphans), and all descendants of
// those. A process that both leaves its group and clears its environment
// before its parent dies escapes it: only cgroup2 contains everything.
func (s *Supervisor) scanTargets(ids map[kin.AgentID]bool, procs []*Process) []int {
	if s.pidns {
		return s.nsTargets(ids)
	}
	table := procTable()
	targets := map[int]bool{}
	leaders := map[int]bool{}
	for _, p := range procs {
		if st, ok := table[p.Pid]; ok && st.alive() {
			targets[p.Pid] = true
			leaders[p.Pid] = true // a live leader keeps its group id from being recycled
		}
	}
	children := map[int][]int{}
	for pid, st := range table {
		if pid == selfPid || !st.alive() {
			continue
		}
		children[st.ppid] = append(children[st.ppid], pid)
		if targets[pid] {
			continue
		}
		if leaders[st.pgid] {
			targets[pid] = true
		} else if id, ok := s.markedAgent(pid); ok && ids[id] {
			targets[pid] = true
		}
	}
	queue := make([]int, 0, len(targets))
	for pid := range targets {
		queue = append(queue, pid)
	}
	for len(queue) > 0 {
		pid := queue[len(queue)-1]
		queue = queue[:len(queue)-1]
		for _, c := range children[pid] {
			if !targets[c] {
				targets[c] = true
				queue = append(queue, c)
			}
		}
	}
	out := make([]int, 0, len(targets))
	for pid := range targets {
		out = append(out, pid)
	}
	return out
}
