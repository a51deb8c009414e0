package fleettest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/fleettest"
	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/kin"
)

// kinSpawnJSON runs `kin spawn --json args...` on h (its CLI, its socket)
// and returns the agent it printed, or kin's output as the error.
func kinSpawnJSON(h *fleettest.Host, args ...string) (*kin.Agent, error) {
	out, err := h.Kin(append([]string{"spawn", "--json"}, args...)...)
	if err != nil {
		return nil, fmt.Errorf("%v: %s", err, strings.TrimSpace(out))
	}
	var a kin.Agent
	if err := json.Unmarshal([]byte(out), &a); err != nil {
		return nil, fmt.Errorf("kin spawn printed %q: %v", out, err)
	}
	return &a, nil
}

// netnsOfPid is the network namespace of pid as /proc shows it ("" when
// it is gone).
func netnsOfPid(pid int) string {
	l, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid))
	return l
}

// netnsOfHost is h's network namespace as /proc shows it.
func netnsOfHost(t *testing.T, h *fleettest.Host) string {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat("/run/netns/"+h.Netns, &st); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("net:[%d]", st.Ino)
}

// cgroupOf is pid's cgroup v2 path ("" when it is gone).
func cgroupOf(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	for _, l := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(l, "0::"); ok {
			return p
		}
	}
	return ""
}

// inCgroupRootOf reports whether pid runs in a cgroup under one of h's
// cgroup roots.
func inCgroupRootOf(pid int, h *fleettest.Host) bool {
	cg := cgroupOf(pid)
	for _, root := range h.CgroupRoots() {
		if cg != "" && strings.Contains(cg+"/", "/"+filepath.Base(root)+"/") {
			return true
		}
	}
	return false
}

// agentCount is how many agents the fleet has registered, read through h.
func agentCount(t *testing.T, h *fleettest.Host) int {
	t.Helper()
	as, err := h.Client.Agents(context.Background(), kin.AgentFilter{})
	if err != nil {
		t.Fatal(err)
	}
	return len(as)
}

// TestSpawnPlacedOnAnotherHost is issue 24's placement: a spawn received
// by one host runs its agent on the host it names (kin spawn --host), that
// host's daemon starting it; by default a child runs on its parent's host;
// an unknown host and a dead one give clear errors and leave nothing
// running or half-registered; a placed owned child dies with its parent
// across hosts.
func TestSpawnPlacedOnAnotherHost(t *testing.T) {
	f := fleettest.Start(t, fenceArgs())
	a, b, c := f.Host(t, "a"), f.Host(t, "b"), f.Host(t, "c")
	ctx := context.Background()
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	root := spawnOn(t, a, "root", 0, time.Second, sleep, "1000")
	logOnFailure(t, a, root)

	// Through a's API, on c: c's daemon starts it, in c's cgroup root
	// and network namespace; a's caller gets its pid. Its environment
	// reaches c through the store, and no event carries it.
	const secret = "s3cr3t-only-in-the-row"
	began := time.Now()
	placed, err := kinSpawnJSON(a, "--host", "c", "--parent", root.ID.String(), "--name", "placed-c", "--grace", "500ms",
		"--env", "PLACED_SECRET="+secret, sleep, "1000")
	if err != nil {
		t.Fatalf("kin spawn --host c through a: %v", err)
	}
	t.Logf("kin spawn --host c through a (the CLI's start included): %s", time.Since(began).Round(time.Millisecond))
	if placed.Host != "c" || placed.PID == 0 || placed.Parent != root.ID {
		t.Fatalf("placed agent = host %q pid %d parent %d; want host c, a pid, parent %d", placed.Host, placed.PID, placed.Parent, root.ID)
	}
	if !alive(placed.PID) {
		t.Fatalf("placed-c's process %d is not running", placed.PID)
	}
	if got, want := netnsOfPid(placed.PID), netnsOfHost(t, c); got != want {
		t.Errorf("placed-c runs in network namespace %s, want c's %s (a daemon other than c's started it)", got, want)
	}
	if !inCgroupRootOf(placed.PID, c) {
		t.Errorf("placed-c's cgroup %s is not under c's cgroup root %v", cgroupOf(placed.PID), c.CgroupRoots())
	}
	// The pid is kin's shim until it has set the sandbox up and exec'd
	// sleep (the spawn answers once the process is started and
	// recorded); the environment read is the program's once it runs.
	if exe := waitExe(placed.PID, sleep, 5*time.Second); exe == "" || filepath.Base(exe) != filepath.Base(sleep) {
		t.Errorf("placed-c's process %d runs %q, want %s", placed.PID, exe, sleep)
	} else if env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", placed.PID)); err != nil || !strings.Contains(string(env), "PLACED_SECRET="+secret) {
		t.Errorf("placed-c's environment lacks PLACED_SECRET (%v)", err)
	}
	for _, h := range []*fleettest.Host{a, b, c} {
		got := agentOn(h, placed.ID)
		if got == nil || got.Host != "c" || got.PID != placed.PID {
			t.Errorf("host %s shows placed-c as %+v; want host c, pid %d", h.Name, got, placed.PID)
		}
		ps := h.Exec(t, "ps")
		line := ""
		for _, l := range strings.Split(ps, "\n") {
			if strings.Contains(l, "placed-c") {
				line = l
			}
		}
		if !slices.Contains(strings.Fields(line), "c") {
			t.Errorf("kin ps on %s does not show placed-c on host c:\n%s", h.Name, ps)
		}
	}
	evs, err := a.Client.Events(ctx, kin.EventFilter{})
	if err != nil {
		t.Fatal(err)
	}
	placedEvents := 0
	for _, e := range evs {
		if strings.Contains(string(e.Data), secret) {
			t.Errorf("event %d (%s) carries the spawn's environment: %s", e.Seq, e.Type, e.Data)
		}
		if e.Type == kin.EventSpawnPlaced && e.Agent == placed.ID {
			placedEvents++
			var d kin.SpawnPlacedData
			if err := json.Unmarshal(e.Data, &d); err != nil || d.Host != "c" || d.By != "a" || d.Parent != root.ID {
				t.Errorf("spawn.placed = %s; want host c, by a, parent %d", e.Data, root.ID)
			}
		}
	}
	if placedEvents != 1 {
		t.Errorf("%d spawn.placed events for placed-c, want 1", placedEvents)
	}
	for _, h := range []*fleettest.Host{a, b, c} {
		if strings.Contains(h.Stderr(), secret) {
			t.Errorf("host %s's log shows the spawn's environment", h.Name)
		}
	}

	// The default: a child runs on its parent's host, whichever host
	// received the spawn; a root, or a child of an agent without a
	// process, on the host that received it.
	kidOfPlaced := spawnDefault(t, b, "kid-of-placed", placed.ID, sleep)
	kidOfRoot := spawnDefault(t, c, "kid-of-root", root.ID, sleep)
	rootOnB := spawnDefault(t, b, "root-on-b", 0, sleep)
	registered, err := c.Client.Register(ctx, kin.RegisterRequest{Name: "registered-on-c", Responsible: "fleettest"})
	if err != nil {
		t.Fatal(err)
	}
	kidOfRegistered := spawnDefault(t, a, "kid-of-registered", registered.ID, sleep)
	for _, w := range []struct {
		ag   *kin.Agent
		host *fleettest.Host
	}{{kidOfPlaced, c}, {kidOfRoot, a}, {rootOnB, b}, {kidOfRegistered, a}} {
		if w.ag.Host != w.host.Name || !inCgroupRootOf(w.ag.PID, w.host) {
			t.Errorf("%s: host %q, cgroup %s; want host %s", w.ag.Name, w.ag.Host, cgroupOf(w.ag.PID), w.host.Name)
		}
	}
	logOnFailure(t, a, placed, kidOfPlaced, kidOfRoot, rootOnB, kidOfRegistered)

	// A process that cannot start on the placed host: its error comes
	// back through the spawner, the agent recorded failed there.
	_, err = a.Client.Spawn(ctx, kin.SpawnRequest{RegisterRequest: kin.RegisterRequest{Name: "no-such-program", Parent: root.ID},
		Command: []string{"/nonexistent/kin-placed"}, Host: "c"})
	if kin.ErrorCodeOf(err) != kin.ECodeInvalid || !strings.Contains(err.Error(), "does not exist") || !strings.Contains(err.Error(), `host "c"`) {
		t.Errorf("a placed spawn of a missing program: %v; want invalid, naming host c and the missing program", err)
	}

	// An unknown host: refused naming the fleet's hosts, nothing
	// registered.
	n0 := agentCount(t, a)
	_, err = kinSpawnJSON(a, "--host", "nosuch", "--parent", root.ID.String(), sleep, "1000")
	if err == nil || !strings.Contains(err.Error(), `"invalid"`) || !strings.Contains(err.Error(), `nosuch\" is not a host of the fleet (its hosts: a, b, c)`) {
		t.Errorf("kin spawn --host nosuch: %v; want the fleet's hosts named", err)
	}
	if n := agentCount(t, a); n != n0 {
		t.Errorf("an unknown host left %d agents registered", n-n0)
	}

	// A cross-host owned child still dies with its parent: the root's
	// process killed on a, placed-c (on c) and its child are cancelled
	// and recorded by c.
	if err := syscall.Kill(root.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	kintest.WaitFor(t, 30*time.Second, "the root's placed descendants gone and recorded cancelled", func() bool {
		for _, ag := range []*kin.Agent{placed, kidOfPlaced, kidOfRoot} {
			got := agentOn(b, ag.ID)
			if alive(ag.PID) || got == nil || got.State != kin.StateCancelled {
				return false
			}
		}
		return true
	})

	// A killed host: a spawn placed on it while its lease still runs
	// waits for the lease to end, then is withdrawn (recorded failed,
	// placement_failed: nothing of it runs); once the lease has ended, a
	// spawn is refused at once with nothing registered.
	b.Kill9(t)
	killed := time.Now()
	_, err = a.Client.Spawn(ctx, kin.SpawnRequest{RegisterRequest: kin.RegisterRequest{Name: "onto-dead-b", Responsible: "fleettest"},
		Command: []string{sleep, "1000"}, Host: "b"})
	t.Logf("a spawn placed on b just after b's daemon was killed: answered after %s: %v", time.Since(killed).Round(time.Millisecond), err)
	if kin.ErrorCodeOf(err) != kin.ECodeUnavailable || !strings.Contains(err.Error(), `host "b"`) || !strings.Contains(err.Error(), "down") {
		t.Errorf("spawn onto a killed host: %v; want unavailable, host b down", err)
	}
	if ags, _ := a.Client.Agents(ctx, kin.AgentFilter{}); true {
		for _, ag := range ags {
			if ag.Name != "onto-dead-b" {
				continue
			}
			// Registered while the lease ran: withdrawn.
			if ag.State != kin.StateFailed || ag.EndReason != "placement_failed" || ag.PID != 0 || ag.EndedAt.IsZero() {
				t.Errorf("onto-dead-b: %s/%s reason %q pid %d; want failed, placement_failed, no process", ag.Status, ag.State, ag.EndReason, ag.PID)
			}
			t.Logf("onto-dead-b was registered while b's lease ran, then withdrawn: %s", ag.EndReason)
		}
	}
	kintest.WaitFor(t, 30*time.Second, "b's lease expired, seen from a", func() bool {
		hs, err := a.Client.Hosts(ctx)
		return err == nil && slices.ContainsFunc(hs, func(h kin.Host) bool { return h.Name == "b" && !h.Live })
	})
	n0 = agentCount(t, a)
	_, err = kinSpawnJSON(a, "--host", "b", "--responsible", "fleettest", "--name", "onto-expired-b", sleep, "1000")
	if err == nil || !strings.Contains(err.Error(), `"unavailable"`) || !strings.Contains(err.Error(), `b\" is down: its lease expired`) || !strings.Contains(err.Error(), "nothing was started or registered") {
		t.Errorf("kin spawn --host b after its lease expired: %v; want host b down, nothing registered", err)
	}
	if n := agentCount(t, a); n != n0 {
		t.Errorf("a spawn onto an expired host left %d agents registered", n-n0)
	}
	// b comes back and starts nothing it was not asked to.
	b.Restart(t)
	if ag, err := b.Client.Spawn(ctx, kin.SpawnRequest{RegisterRequest: kin.RegisterRequest{Name: "onto-b-again", Responsible: "fleettest"},
		Command: []string{sleep, "1000"}, Host: "b"}); err != nil || ag.Host != "b" || !inCgroupRootOf(ag.PID, b) {
		t.Errorf("a spawn onto b once it is back: %+v, %v", ag, err)
	}
	for _, ag := range must(a.Client.Agents(ctx, kin.AgentFilter{})) {
		if strings.HasPrefix(ag.Name, "onto-") && ag.Name != "onto-b-again" && (ag.PID != 0 || !ag.EndedAt.IsZero() && ag.State != kin.StateFailed) {
			t.Errorf("%s: %+v; want never started", ag.Name, ag)
		}
	}
	verifyFleetLog(t, f, c, a, 0) // placements, withdrawals and the killed host are in the fleet's one log
}

// spawnDefault spawns through h with no host named: the default
// placement.
func spawnDefault(t *testing.T, h *fleettest.Host, name string, parent kin.AgentID, command ...string) *kin.Agent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ag, err := h.Client.Spawn(ctx, kin.SpawnRequest{
		RegisterRequest: kin.RegisterRequest{Name: name, Parent: parent, Responsible: "fleettest"},
		Command:         append(slices.Clone(command), "1000"),
	})
	if err != nil {
		t.Fatalf("spawn %s through %s: %v", name, h.Name, err)
	}
	if ag.PID == 0 {
		t.Fatalf("%s has no process: %+v", name, ag)
	}
	return ag
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestOneHOPerPlacedHost is seed 002's "one HO per physical host" in a
// fleet: under the hierarchy profile, the HO cardinality is counted on the
// host an HO is placed on, not the host that received the spawn.
func TestOneHOPerPlacedHost(t *testing.T) {
	f := fleettest.Start(t, fleettest.WithServeArgs("--profile", "hierarchy"))
	a, b, c := f.Host(t, "a"), f.Host(t, "b"), f.Host(t, "c")
	ctx := context.Background()
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	goAgent, err := a.Client.Register(ctx, kin.RegisterRequest{Name: "GO", Responsible: "fleettest"})
	if err != nil {
		t.Fatal(err)
	}
	spawnHO := func(through *fleettest.Host, name, host string) (*kin.Agent, error) {
		return through.Client.Spawn(ctx, kin.SpawnRequest{RegisterRequest: kin.RegisterRequest{Name: name, Parent: goAgent.ID},
			Command: []string{sleep, "1000"}, Host: host})
	}
	// Received by a, placed on b: b's first HO.
	hoB, err := spawnHO(a, "HO@b", "b")
	if err != nil || hoB.Role != "HO" || hoB.Host != "b" || !inCgroupRootOf(hoB.PID, b) {
		t.Fatalf("HO@b through a onto b: %+v, %v", hoB, err)
	}
	// Received by a (which runs no HO), placed on b (which does): refused.
	_, err = spawnHO(a, "HO@b2", "b")
	if kin.ErrorCodeOf(err) != kin.ECodeCardinality || !strings.Contains(err.Error(), `host "b" already runs one`) {
		t.Errorf("a second HO placed on b through a: %v; want cardinality_exceeded naming host b", err)
	}
	// Received by b (which runs one), placed on c (which does not): fine.
	hoC, err := spawnHO(b, "HO@c", "c")
	if err != nil || hoC.Host != "c" || !inCgroupRootOf(hoC.PID, c) {
		t.Fatalf("HO@c through b onto c: %+v, %v", hoC, err)
	}
	// Received by c with no host named (its parent, GO, runs no process:
	// placed on c), which runs one: refused.
	_, err = spawnHO(c, "HO@c2", "")
	if kin.ErrorCodeOf(err) != kin.ECodeCardinality || !strings.Contains(err.Error(), `host "c" already runs one`) {
		t.Errorf("a second HO on c: %v; want cardinality_exceeded naming host c", err)
	}
	for _, ag := range must(a.Client.Agents(ctx, kin.AgentFilter{Role: "HO"})) {
		if ag.Live() && ag.Name != "HO@b" && ag.Name != "HO@c" {
			t.Errorf("a refused HO is live: %+v", ag)
		}
	}
}

// TestPlacedWhileItsHostRestarts: a spawn placed on a host whose daemon
// was killed, its lease still running, is started by that host's next
// daemon: the spawn.placed event came while no daemon followed the store
// there, and the restarted one reads the recent placements for itself
// (Runner.resumePlaced) instead of leaving its spawner to withdraw the
// agent at the placement's timeout.
func TestPlacedWhileItsHostRestarts(t *testing.T) {
	f := fleettest.Start(t, fleettest.WithServeArgs("--host-lease", "30s"))
	a, b := f.Host(t, "a"), f.Host(t, "b")
	ctx := context.Background()
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	b.Kill9(t)
	type result struct {
		ag  *kin.Agent
		err error
	}
	done := make(chan result, 1)
	go func() {
		ag, err := a.Client.Spawn(ctx, kin.SpawnRequest{RegisterRequest: kin.RegisterRequest{Name: "placed-on-restarting-b", Responsible: "fleettest"},
			Command: []string{sleep, "1000"}, Host: "b"})
		done <- result{ag, err}
	}()
	kintest.WaitFor(t, 10*time.Second, "the spawn placed on b registered (b's lease runs)", func() bool {
		ags, err := a.Client.Agents(ctx, kin.AgentFilter{Name: "placed-on-restarting-b"})
		return err == nil && len(ags) == 1
	})
	b.Restart(t)
	var r result
	select {
	case r = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("the spawn placed on b did not return")
	}
	if r.err != nil || r.ag == nil || r.ag.Host != "b" || r.ag.PID == 0 || !inCgroupRootOf(r.ag.PID, b) {
		t.Fatalf("a spawn placed on b across b's restart: %+v, %v; want started by b's new daemon", r.ag, r.err)
	}
	if got := agentOn(a, r.ag.ID); got == nil || got.PID != r.ag.PID || got.State.Terminal() {
		t.Errorf("the placed agent as recorded: %+v", got)
	}
}

// waitExe waits until pid runs the program want (it has exec'd past
// kin's shim), or until the deadline, and returns what it runs then.
func waitExe(pid int, want string, within time.Duration) string {
	if real, err := filepath.EvalSymlinks(want); err == nil {
		want = real
	}
	deadline := time.Now().Add(within)
	for {
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		if exe == want || time.Now().After(deadline) {
			return exe
		}
		time.Sleep(5 * time.Millisecond)
	}
}
