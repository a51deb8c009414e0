package proctest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestCountInodesCountsFilesMade: three files made and removed on ext4 are
// three inodes allocated and three freed, whether or not the machine has
// tracefs mounted (without it, CountInodes reads the events' ids from a
// tracefs of its own, which it leaves mounted nowhere, and this process
// stays in its mount namespace).
func TestCountInodesCountsFilesMade(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("counting ext4's tracepoints needs root (perf_event_open)")
	}
	dir := t.TempDir()
	var fs syscall.Statfs_t
	if err := syscall.Statfs(dir, &fs); err != nil {
		t.Fatal(err)
	}
	const ext4Magic = 0xef53
	if fs.Type != ext4Magic {
		t.Skipf("the temporary directory %s is not on ext4 (f_type %#x): no ext4 inodes to count", dir, fs.Type)
	}
	mounted := tracefsMounted(t)
	ns := mountNamespace(t)
	c, err := CountInodes()
	if err != nil {
		t.Fatalf("CountInodes as root on ext4 (tracefs mounted: %v): %v", mounted, err)
	}
	defer c.Close()
	for i := range 3 {
		p := filepath.Join(dir, fmt.Sprint(i))
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
	if alloc, freed := c.Read(); alloc != 3 || freed != 3 {
		t.Errorf("3 files made and removed: counted %d allocated and %d freed, want 3 and 3", alloc, freed)
	}
	if now := tracefsMounted(t); now != mounted {
		t.Errorf("tracefs mounted before CountInodes: %v, after: %v; it must leave the machine's mounts as they were", mounted, now)
	}
	if now := mountNamespace(t); now != ns {
		t.Errorf("the process's mount namespace was %s before CountInodes and is %s after: it must not move", ns, now)
	}
}

// mountNamespace names the mount namespace /proc/self (the main thread)
// is in.
func mountNamespace(t *testing.T) string {
	t.Helper()
	ns, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

// tracefsMounted reports whether this mount namespace has a tracefs.
func tracefsMounted(t *testing.T) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 2 && f[2] == "tracefs" {
			return true
		}
	}
	return false
}
