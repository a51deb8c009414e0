package supervisor

import (
	"errors"
	"testing"
	"time"
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
	if u2.Pids != nil && *u2.Pids != 1 {
		t.Errorf("the spinner's group counts %d pids, want 1", *u2.Pids)
	}
}

func TestUsageProcessGroups(t *testing.T) {
	s := newSup(t, Config{Containment: ContainmentProcessGroups})
	start(t, s, sleeper(1, 0))
	if _, err := s.Usage(1); !errors.Is(err, ErrNoUsage) {
		t.Errorf("Usage with process groups: %v, want ErrNoUsage", err)
	}
}
