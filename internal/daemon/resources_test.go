package daemon_test

import (
	"strings"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/kin"
)

// spawnShell spawns "sh -c script" as a root agent.
func spawnShell(t *testing.T, svc kin.Service, name, script string) *kin.Agent {
	t.Helper()
	req := kin.SpawnRequest{Command: []string{"/bin/sh", "-c", script}}
	req.Name, req.Responsible = name, "Dr. Schmidt"
	a, err := svc.Spawn(ctx, req)
	if err != nil {
		t.Fatalf("spawn %s: %v", name, err)
	}
	return a
}

// A busy agent's CPU time, read from its cgroup's cpu.stat through the SDK
// and the API, grows; an idle one's barely does; an agent without a running
// process has none to read, and says why.
func TestResources(t *testing.T) {
	d := kintest.StartDaemon(t)
	if st, _ := d.Client.Status(ctx); st.Containment != "cgroup2" {
		t.Skipf("containment is %s: resources are read from cgroups", st.Containment)
	}
	busy := spawnShell(t, d.Client, "busy", "while :; do :; done")
	idle := spawnShell(t, d.Client, "idle", "exec sleep 1000")
	var r *kin.AgentResources
	kintest.WaitFor(t, 20*time.Second, "the busy agent's CPU time", func() bool {
		var err error
		r, err = d.Client.Resources(ctx, busy.ID)
		if err != nil {
			t.Fatalf("Resources(busy): %v", err)
		}
		return r.CPUUsec >= 100_000
	})
	if r.Agent != busy.ID || r.At.IsZero() || r.SubtreeCPUUsec < r.CPUUsec {
		t.Errorf("Resources(busy) = %+v", r)
	}
	ri, err := d.Client.Resources(ctx, idle.ID)
	if err != nil || ri.CPUUsec >= r.CPUUsec {
		t.Errorf("Resources(idle) = %+v, %v; want less CPU than the busy agent's %d µs", ri, err, r.CPUUsec)
	}
	// Memory is absent where its controller is, never zero; the tasks are
	// counted either way (pids.current, or cgroup.threads): the idle
	// agent's one sleep, once its shim has exec'd it (a loaded machine may
	// still be starting it).
	if ri.MemoryBytes != nil && *ri.MemoryBytes == 0 {
		t.Errorf("Resources(idle) memory 0: absent, never zero, without its controller")
	}
	kintest.WaitFor(t, 20*time.Second, "the idle agent's one task", func() bool {
		ri, err = d.Client.Resources(ctx, idle.ID)
		if err != nil || ri.Pids == nil {
			t.Fatalf("Resources(idle) = %+v, %v: want its tasks counted", ri, err)
		}
		return *ri.Pids == 1
	})

	if _, err := d.Client.Stop(ctx, kin.StopRequest{ID: busy.ID}); err != nil {
		t.Fatal(err)
	}
	reg, err := d.Client.Register(ctx, kin.RegisterRequest{Name: "no-process", Responsible: "Dr. Schmidt"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		id   kin.AgentID
		code kin.ErrorCode
		want string
	}{
		{busy.ID, kin.ECodeInvalid, "no running process"},
		{reg.ID, kin.ECodeInvalid, "no running process"},
		{9999, kin.ECodeNotFound, "9999"},
	} {
		_, err := d.Client.Resources(ctx, tc.id)
		if kin.ErrorCodeOf(err) != tc.code || err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Resources(%d) = %v, want %s naming %q", tc.id, err, tc.code, tc.want)
		}
	}
}

// With process groups there is no cgroup to read: the error names the
// containment.
func TestResourcesWithProcessGroups(t *testing.T) {
	d := kintest.StartDaemon(t, kintest.WithContainment("process-groups"))
	a := spawnShell(t, d.Client, "idle", "exec sleep 1000")
	_, err := d.Client.Resources(ctx, a.ID)
	if kin.ErrorCodeOf(err) != kin.ECodeInvalid || !strings.Contains(err.Error(), "process-groups") {
		t.Errorf("Resources with process groups = %v, want invalid naming the containment", err)
	}
}
