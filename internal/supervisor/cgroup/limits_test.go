package cgroup

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// The files SetLimits writes and the values it writes, checked in a plain
// directory standing in for a group: this host's cgroup v2 hierarchy has
// no pids, memory or cpu controller to write them to (they are on v1).
func TestSetLimitsWritesTheFiles_FakeCgroupDir(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"pids.max", "memory.max", "cpu.max"} { // no memory.swap.max: swap not accounted
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	l := Limits{Pids: 50, MemoryBytes: 256 << 20, CPUCores: 0.5}
	missing, err := SetLimits(dir, l, []string{"pids", "memory", "cpu"})
	if err != nil || len(missing) != 0 {
		t.Fatalf("SetLimits = %v, %v", missing, err)
	}
	for name, want := range map[string]string{"pids.max": "50", "memory.max": "268435456", "cpu.max": "50000 100000"} {
		if b, _ := os.ReadFile(filepath.Join(dir, name)); string(b) != want {
			t.Errorf("%s = %q, want %q", name, b, want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "memory.swap.max")); err == nil {
		t.Error("memory.swap.max was created: SetLimits must only write files the kernel made")
	}

	// A controller that is not enabled: nothing written, and said so.
	missing, err = SetLimits(dir, Limits{Pids: 7, CPUCores: 0.001}, []string{"memory"})
	if err != nil || !reflect.DeepEqual(missing, []string{"pids", "cpu"}) {
		t.Fatalf("SetLimits without pids and cpu = %v, %v", missing, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "pids.max")); string(b) != "50" {
		t.Errorf("pids.max = %q after a refused write", b)
	}
	// The least quota the kernel takes is 1 ms a period.
	if f := (Limits{CPUCores: 0.001}).Files(); len(f) != 1 || f[0].Value != "1000 100000" {
		t.Errorf("cpu.max for 0.001 cores = %+v", f)
	}
	// A write the kernel refuses is an error naming the file.
	if _, err := SetLimits(filepath.Join(dir, "gone"), Limits{Pids: 1}, []string{"pids"}); err == nil {
		t.Error("SetLimits into a missing group succeeded")
	}
}
