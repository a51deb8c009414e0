package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Controllers lists the controllers dir's parent grants it (dir's
// cgroup.controllers): the only ones dir may enable below itself.
func Controllers(dir string) ([]string, error) {
	b, err := readFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(b)), nil
}

// EnableControllers enables names below dir (cgroup.subtree_control, "+a
// +b"), so that every group created in dir gets their files and limits. The
// kernel refuses it for a group holding processes itself (the "no internal
// processes" rule), which kin's agent groups never do: processes live in
// their self leaves.
func EnableControllers(dir string, names []string) error {
	if len(names) == 0 {
		return nil
	}
	var b strings.Builder
	for i, n := range names {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString("+" + n)
	}
	if err := writeFile(dir, "cgroup.subtree_control", b.String()); err != nil {
		return fmt.Errorf("enable %s in %s/cgroup.subtree_control: %w", strings.Join(names, ", "), dir, err)
	}
	return nil
}

// Limits are the limits one group puts on everything below it. A zero
// field leaves that limit as it is.
type Limits struct {
	// Pids is pids.max: tasks (threads count) of the whole group.
	Pids int64
	// MemoryBytes is memory.max, with memory.swap.max 0 where the kernel
	// accounts swap, so the group cannot go past it into swap.
	MemoryBytes int64
	// CPUCores is cpu.max: quota per 100 ms period, 0.5 is half a core.
	CPUCores float64
}

// CPUPeriod is the cpu.max period kin writes (the kernel's default).
const CPUPeriod = 100_000

// Files is what SetLimits writes for l, file by file, with the controller
// each needs.
func (l Limits) Files() []LimitFile {
	var out []LimitFile
	if l.Pids > 0 {
		out = append(out, LimitFile{"pids", "pids.max", strconv.FormatInt(l.Pids, 10)})
	}
	if l.MemoryBytes > 0 {
		out = append(out,
			LimitFile{"memory", "memory.max", strconv.FormatInt(l.MemoryBytes, 10)},
			LimitFile{"memory", "memory.swap.max", "0"})
	}
	if l.CPUCores > 0 {
		quota := int64(math.Round(l.CPUCores * CPUPeriod))
		quota = max(quota, 1000) // the kernel's least quota is 1 ms
		out = append(out, LimitFile{"cpu", "cpu.max", strconv.FormatInt(quota, 10) + " " + strconv.Itoa(CPUPeriod)})
	}
	return out
}

// LimitFile is one limit: the controller it needs, its file, its value.
type LimitFile struct {
	Controller, Name, Value string
}

// SetLimits writes l's files into dir for the controllers in enabled (the
// ones dir's parent enabled), and returns the controllers l needed that
// were not enabled: those limits are not set. memory.swap.max is skipped
// where the kernel does not account swap (the file is absent).
func SetLimits(dir string, l Limits, enabled []string) (missing []string, err error) {
	for _, f := range l.Files() {
		if !slices.Contains(enabled, f.Controller) {
			if !slices.Contains(missing, f.Controller) {
				missing = append(missing, f.Controller)
			}
			continue
		}
		if err := writeFile(dir, f.Name, f.Value); err != nil {
			if f.Name == "memory.swap.max" && errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return missing, fmt.Errorf("set %s/%s to %s: %w", dir, f.Name, f.Value, err)
		}
	}
	return missing, nil
}

// Tasks counts the tasks (threads) in dir and every group below it, from
// cgroup.threads: what pids.current counts, for groups without the pids
// controller.
func Tasks(dir string) (int64, error) {
	var n int64
	err := Walk(dir, func(d string) error {
		b, err := readFile(filepath.Join(d, "cgroup.threads"))
		if errors.Is(err, fs.ErrNotExist) && d != dir {
			return nil
		}
		if err != nil {
			return err
		}
		n += int64(len(strings.Fields(string(b))))
		return nil
	})
	return n, err
}
