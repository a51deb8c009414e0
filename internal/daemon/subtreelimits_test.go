package daemon_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/internal/proctest"
	"github.com/kin-agents/kin/kin"
)

// forkBomb is an agent's shell that tries to start tries sleeps marked
// with mark (an argument no other process has), writes "forked" to out
// once the loop is over (the loop's shell exits at its first failed fork),
// and stays: exec needs no fork.
func forkBomb(tries int, mark, out string) []string {
	return []string{"/bin/sh", "-c", fmt.Sprintf(
		`( i=0; while [ $i -lt %d ]; do sleep 1000 %s & i=$((i+1)); done ) ; echo forked > %s; exec sleep 1000`,
		tries, mark, out)}
}

// sleepMark is an argument for sleep that adds nothing to its time and
// marks its processes: "0.000" and random digits.
func sleepMark() string { return fmt.Sprintf("0.000%09d", rand.IntN(1e9)) }

// A limit binds however many processes an agent forks: budget.pids 50
// holds an agent that tries 500 to at most 50 tasks, and an agent with no
// policy at all gets the profile's default (limits.pids). Here by
// RLIMIT_NPROC on each agent's own uid (the pids controller is on cgroup
// v1 on this host), by pids.max where the v2 hierarchy has it; kin show
// says which.
func TestPidsLimitHoldsAForkBomb(t *testing.T) {
	d := kintest.StartDaemon(t, kintest.WithProfile(profileFile(t, `{"name":"small","max_generation_depth":3,"limits":{"pids":80}}`)))
	st, err := d.Client.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Limits) == 0 || st.Limits[0].Name != "pids" || st.Limits[0].Scope == kin.LimitNone {
		t.Fatalf("status limits %+v: pids is not enforced by this daemon (%s)", st.Limits, st.Containment)
	}
	t.Logf("pids limit: %s by %s (%s)", st.Limits[0].Scope, st.Limits[0].By, st.Limits[0].Note)
	dir := kintest.SharedDir(t) // agents write there as their own uids

	for _, tc := range []struct {
		name   string
		policy *kin.Policy
		limit  int
	}{
		{"budget.pids", &kin.Policy{Budget: &kin.Budget{Pids: ptr(int64(50))}}, 50},
		{"profile default", nil, 80},
		{"budget.pids above the default", &kin.Policy{Budget: &kin.Budget{Pids: ptr(int64(200))}}, 80},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mark, out := sleepMark(), filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
			t.Cleanup(func() { killMarked(mark) })
			req := kin.SpawnRequest{Command: forkBomb(500, mark, out)}
			req.Name, req.Responsible, req.Policy = strings.ReplaceAll(tc.name, " ", "-"), "ops", tc.policy
			req.Name = strings.ReplaceAll(req.Name, ".", "-")
			a, err := d.Client.Spawn(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			kintest.WaitFor(t, 30*time.Second, "the fork loop to end", func() bool {
				if _, err := os.Stat(out); err == nil {
					return true
				}
				if g, err := d.Client.Agent(ctx, a.ID); err == nil && !g.Running() {
					log, _ := os.ReadFile(filepath.Join(d.Home, "logs", a.ID.String()+".log"))
					t.Fatalf("the agent ended (%s) before its loop did; its log:\n%s", g.State, log)
				}
				return false
			})
			n := len(proctest.WithArg(mark))
			if n >= tc.limit || n < tc.limit/2 {
				t.Errorf("the agent started %d of 500 processes under a limit of %d tasks (its shell and the loop's count too): want fewer than %d and at least %d", n, tc.limit, tc.limit, tc.limit/2)
			}
			pol, err := d.Client.Policy(ctx, a.ID)
			if err != nil {
				t.Fatal(err)
			}
			if l := pol.Effective.Limits; len(l) == 0 || l[0].Name != "pids" || l[0].Value != float64(tc.limit) || l[0].Scope == kin.LimitNone {
				t.Errorf("effective limits %+v, want pids %d enforced", l, tc.limit)
			}
			if st.Containment == "cgroup2" {
				r, err := d.Client.Resources(ctx, a.ID)
				if err != nil || r.Pids == nil || *r.Pids > int64(tc.limit) || *r.Pids < int64(n) {
					t.Errorf("resources %+v, %v: want the %d processes and the shell counted, at most %d", r, err, n, tc.limit)
				} else if len(r.Limits) == 0 || r.Limits[0].Name != "pids" {
					t.Errorf("resources carry no pids limit: %+v", r.Limits)
				}
			}
			if _, err := d.Client.Stop(ctx, kin.StopRequest{ID: a.ID}); err != nil {
				t.Fatal(err)
			}
			kintest.WaitFor(t, 20*time.Second, "the agent's processes to end with it", func() bool { return len(proctest.WithArg(mark)) == 0 })
		})
	}
}

// killMarked kills what a failed test left.
func killMarked(mark string) {
	for _, pid := range proctest.WithArg(mark) {
		if p, err := os.FindProcess(pid); err == nil {
			p.Kill()
		}
	}
}

// The memory and cpu subtree limits need their cgroup v2 controllers: where
// kin's tree has them, the agent's group carries the policy's values;
// where it has not (this host: they are on cgroup v1), kin says so and
// never claims them.
func TestMemoryAndCPULimitsNeedTheirControllers(t *testing.T) {
	d := kintest.StartDaemon(t)
	st, err := d.Client.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Containment != "cgroup2" {
		t.Skipf("containment is %s: subtree limits are set on cgroups", st.Containment)
	}
	enforced := map[string]kin.ResourceLimit{}
	for _, l := range st.Limits {
		enforced[l.Name] = l
	}
	req := kin.SpawnRequest{Command: []string{"sleep", "1000"}}
	req.Name, req.Responsible = "bounded", "ops"
	req.Policy = &kin.Policy{Budget: &kin.Budget{Memory: ptr(int64(256 << 20)), CPU: ptr(0.5)}}
	a, err := d.Client.Spawn(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	group := filepath.Join(st.CgroupRoot, "a"+a.ID.String())
	if _, err := os.Stat(group); err != nil {
		t.Fatalf("the agent's group: %v", err)
	}
	for _, c := range []struct{ limit, file, want string }{{"memory", "memory.max", "268435456"}, {"cpu", "cpu.max", "50000 100000"}} {
		l := enforced[c.limit]
		b, err := os.ReadFile(filepath.Join(group, c.file))
		if l.Scope != kin.LimitSubtree {
			// Not enforced on the subtree: never claimed, and said.
			if err == nil {
				t.Errorf("%s exists but kin says budget.%s binds %s", c.file, c.limit, l.Scope)
			}
			if !strings.Contains(strings.Join(st.Missing, "\n"), "budget."+c.limit) {
				t.Errorf("kin status does not list budget.%s among the missing guarantees: %q", c.limit, st.Missing)
			}
		}
		t.Run(c.limit, func(t *testing.T) {
			if l.Scope != kin.LimitSubtree {
				t.Skipf("the %s controller is missing from this host's cgroup v2 hierarchy: %s", c.limit, l.Note)
			}
			if err != nil || strings.TrimSpace(string(b)) != c.want {
				t.Errorf("%s = %q, %v; want %s", c.file, b, err, c.want)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// The rlimits an agent's process gets are the ones kin shows: budget.pids
// as RLIMIT_NPROC where it binds the agent's own tasks, and RLIMIT_AS the
// least of memory_bytes and, without the memory controller, memory.
func TestRlimitsAreTheLimitsShown(t *testing.T) {
	d := kintest.StartDaemon(t)
	req := kin.SpawnRequest{Command: []string{"sleep", "1000"}}
	req.Name, req.Responsible = "limited", "ops"
	req.Policy = &kin.Policy{Budget: &kin.Budget{Pids: ptr(int64(77)), Memory: ptr(int64(512 << 20)), MemoryBytes: ptr(int64(1 << 30)), OpenFiles: ptr(int64(99))}}
	a, err := d.Client.Spawn(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	pol, err := d.Client.Policy(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"Max open files": "99"}
	for _, l := range pol.Effective.Limits {
		switch {
		case l.By == "RLIMIT_NPROC":
			want["Max processes"] = fmt.Sprint(int64(l.Value))
		case l.Name == "memory" && l.By == "RLIMIT_AS":
			want["Max address space"] = fmt.Sprint(int64(l.Value)) // the lesser
		}
	}
	if _, ok := want["Max address space"]; !ok {
		want["Max address space"] = fmt.Sprint(1 << 30)
	}
	// The shim sets them before its exec, after the spawn has returned:
	// read until they are all there (or the deadline says which is not).
	var limits string
	missing := func() []string {
		var out []string
		for name, v := range want {
			found := false
			for line := range strings.Lines(limits) {
				if f := strings.Fields(strings.TrimPrefix(line, name)); strings.HasPrefix(line, name) && len(f) >= 2 && f[0] == v && f[1] == v {
					found = true
				}
			}
			if !found {
				out = append(out, fmt.Sprintf("%s %s", name, v))
			}
		}
		return out
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/limits", a.PID))
		limits = string(b)
		if len(missing()) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 20 s, not (soft and hard) for agent %d: %v, as its limits %+v say:\n%s", a.ID, missing(), pol.Effective.Limits, limits)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
