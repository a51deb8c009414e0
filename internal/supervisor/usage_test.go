package supervisor

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/supervisor/cgroup"
)

// A spinning process's CPU time shows in its own group's usage and in its
// parent's subtree usage, not in its parent's own; memory and pids appear
// only where their controllers are enabled.
func TestUsage(t *testing.T) {
	s := newCgroupSup(t, Config{})
	start(t, s, sleeper(1, 0))
	start(t, s, Spec{ID: 2, ParentID: 1, Argv: []string{"/bin/sh", "-c", "while :; do :; done"}})
	var u2 Usage
	waitFor(t, 20*time.Second, "the spinner's CPU time", func() bool {
		var err error
		u2, err = s.Usage(2)
		if err != nil {
			t.Fatalf("Usage(2): %v", err)
		}
		return u2.CPUUsec >= 50_000
	})
	u1, err := s.Usage(1)
	if err != nil {
		t.Fatalf("Usage(1): %v", err)
	}
	if u1.SubtreeCPUUsec < u2.CPUUsec || u1.CPUUsec >= u2.CPUUsec {
		t.Errorf("parent %+v, spinning child %+v: want the child's time in the parent's subtree only", u1, u2)
	}
	if _, err := s.Usage(99); !errors.Is(err, ErrUnknownAgent) {
		t.Errorf("Usage(99) of no agent: %v, want ErrUnknownAgent", err)
	}
	// pids.current, or the tasks the groups list where the pids
	// controller is off: the same count either way.
	if u2.Pids == nil || *u2.Pids != 1 {
		t.Errorf("the spinner's group counts %v tasks, want 1", u2.Pids)
	}
	if u1.Pids == nil || *u1.Pids != 2 {
		t.Errorf("the parent's subtree counts %v tasks, want 2 (the sleeper and the spinner)", u1.Pids)
	}
}

// A group's limits are written where kin enabled the controller, and
// said to be missing where it could not: never silently claimed.
func TestStartWritesSubtreeLimits(t *testing.T) {
	s := newCgroupSup(t, Config{})
	granted, err := cgroup.Controllers(s.Root())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range SubtreeControllers {
		if slices.Contains(granted, c) != slices.Contains(s.Controllers(), c) {
			t.Errorf("controller %s: granted to kin's root %v, enabled %v", c, granted, s.Controllers())
		}
	}
	missing, parent := s.MissingControllers()
	if len(missing)+len(s.Controllers()) != len(SubtreeControllers) || parent != filepath.Dir(s.Root()) {
		t.Errorf("MissingControllers = %v, %q; enabled %v", missing, parent, s.Controllers())
	}
	spec := sleeper(1, 0)
	spec.Limits = cgroup.Limits{Pids: 50, MemoryBytes: 64 << 20, CPUCores: 0.5}
	p := start(t, s, spec)
	for _, f := range spec.Limits.Files() {
		b, err := os.ReadFile(filepath.Join(p.Cgroup, f.Name))
		switch {
		case slices.Contains(s.Controllers(), f.Controller):
			if err != nil || strings.TrimSpace(string(b)) != f.Value {
				t.Errorf("%s = %q, %v; want %s", f.Name, b, err, f.Value)
			}
		case err == nil:
			t.Errorf("%s exists although the %s controller is not enabled", f.Name, f.Controller)
		}
	}
	if len(missing) > 0 {
		t.Logf("this host's cgroup v2 hierarchy does not grant %v to %s: those limits fall back to rlimits", missing, parent)
	}
}

func TestUsageProcessGroups(t *testing.T) {
	s := newSup(t, Config{Containment: ContainmentProcessGroups})
	start(t, s, sleeper(1, 0))
	if _, err := s.Usage(1); !errors.Is(err, ErrNoUsage) {
		t.Errorf("Usage with process groups: %v, want ErrNoUsage", err)
	}
}
