package supervisor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/kin-agents/kin/internal/supervisor/cgroup"
	"github.com/kin-agents/kin/kin"
)

// ErrNoUsage: the agent's resource use cannot be read, because its
// processes are contained by process groups, not cgroups.
var ErrNoUsage = errors.New("supervisor: resource use is read from cgroups, and this supervisor has none (process groups)")

// Usage is what an agent's cgroups account for now.
type Usage struct {
	// CPUUsec is the CPU time of the agent's own processes (its self
	// leaf's cpu.stat usage_usec); SubtreeCPUUsec adds its descendants'.
	CPUUsec, SubtreeCPUUsec int64
	// MemoryBytes is the subtree's memory.current, nil where the memory
	// controller is not enabled. Pids is its pids.current, or where the
	// pids controller is not enabled the tasks its groups list.
	MemoryBytes, Pids *int64
}

// Usage reads agent id's group accounting.
func (s *Supervisor) Usage(id kin.AgentID) (Usage, error) {
	if !s.cg {
		return Usage{}, ErrNoUsage
	}
	a, err := s.lookup(id)
	if err != nil {
		return Usage{}, err
	}
	var u Usage
	if u.CPUUsec, err = cpuUsage(selfDir(a.path)); err != nil {
		return u, err
	}
	if u.SubtreeCPUUsec, err = cpuUsage(a.path); err != nil {
		return u, err
	}
	if u.MemoryBytes, err = optionalCount(a.path, "memory.current"); err != nil {
		return u, err
	}
	if u.Pids, err = optionalCount(a.path, "pids.current"); err != nil || u.Pids != nil {
		return u, err
	}
	n, err := cgroup.Tasks(a.path)
	if err != nil {
		return u, err
	}
	u.Pids = &n
	return u, nil
}

// cpuUsage reads usage_usec from dir's cpu.stat, which every cgroup v2
// group has, with or without the cpu controller.
func cpuUsage(dir string) (int64, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cpu.stat"))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("%s/cpu.stat has no usage_usec", dir)
}

// optionalCount reads a one-number file that exists only where its
// controller is enabled: nil when it does not.
func optionalCount(dir, name string) (*int64, error) {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("%s/%s: %w", dir, name, err)
	}
	return &n, nil
}
