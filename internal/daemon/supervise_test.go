package daemon_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kin-agents/kin/client"
	"github.com/kin-agents/kin/internal/daemon"
	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/kin"
)

// These tests run real processes in real cgroups (cgroup v2 here; the
// daemon falls back to process groups elsewhere and says so in Status).

const testGrace = 200 * time.Millisecond

type spawnOpt func(*kin.SpawnRequest)

func withGrace(d time.Duration) spawnOpt {
	return func(r *kin.SpawnRequest) { g := kin.Duration(d); r.Grace = &g }
}

func withLife(l kin.Life) spawnOpt { return func(r *kin.SpawnRequest) { r.Life = l } }

func withRestart(p kin.RestartPolicy) spawnOpt { return func(r *kin.SpawnRequest) { r.Restart = p } }

func withEnv(kv ...string) spawnOpt {
	return func(r *kin.SpawnRequest) { r.Env = append(r.Env, kv...) }
}

// spawnAgent spawns the test binary as an agent running mode.
func spawnAgent(t testing.TB, svc kin.Service, name string, parent kin.AgentID, mode string, opts ...spawnOpt) *kin.Agent {
	t.Helper()
	req := kin.SpawnRequest{
		RegisterRequest: kin.RegisterRequest{Name: name, Parent: parent},
		Command:         []string{kintest.AgentBinary(t)},
		Env:             []string{"KINTEST_MODE=" + mode},
	}
	if parent == 0 {
		req.Responsible = "Dr. Schmidt"
	}
	withGrace(testGrace)(&req)
	for _, o := range opts {
		o(&req)
	}
	a, err := svc.Spawn(ctx, req)
	if err != nil {
		t.Fatalf("spawn %s: %v", name, err)
	}
	if a.PID == 0 || a.StartedAt.IsZero() {
		t.Fatalf("spawned agent has no process: %+v", a)
	}
	return a
}

// outPath is a file an agent program writes what it has to say to.
func outPath(t testing.TB) string {
	path := filepath.Join(kintest.SharedDir(t), "out")
	// Every agent appends, whatever uid it runs as.
	if err := os.WriteFile(path, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o666); err != nil {
		t.Fatal(err)
	}
	return path
}

func waitOut(t testing.TB, path, want string) string {
	t.Helper()
	var got string
	kintest.WaitFor(t, 10*time.Second, fmt.Sprintf("%q in %s", want, path), func() bool {
		b, _ := os.ReadFile(path)
		got = string(b)
		return strings.Contains(got, want)
	})
	return got
}

// alive reports whether pid is a process that has not exited.
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i > 0 && i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X'
}

func waitAgent(t *testing.T, svc kin.Service, id kin.AgentID, what string, cond func(*kin.Agent) bool) *kin.Agent {
	t.Helper()
	var a *kin.Agent
	kintest.WaitFor(t, 15*time.Second, fmt.Sprintf("agent %d %s", id, what), func() bool {
		var err error
		a, err = svc.Agent(ctx, id)
		return err == nil && cond(a)
	})
	return a
}

func stateIs(s kin.State) func(*kin.Agent) bool {
	return func(a *kin.Agent) bool { return a.State == s }
}

func events(t *testing.T, svc kin.Service, f kin.EventFilter) []kin.Event {
	t.Helper()
	evs, err := svc.Events(ctx, f)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

func field[T any](t *testing.T, e kin.Event, name string) T {
	t.Helper()
	var v T
	if err := e.Field(name, &v); err != nil {
		t.Fatalf("event %d: %v", e.Seq, err)
	}
	return v
}

// TestParentKilledCancelsWholeOwnedTree is seed 001's "Parent Death": the
// root of a 3-generation tree is SIGKILLed, and every descendant (one that
// double-forked into a new session, one that ignores SIGTERM) is gone and
// recorded cancelled with the seed's events.
func TestParentKilledCancelsWholeOwnedTree(t *testing.T) {
	d := kintest.StartDaemon(t)
	st, _ := d.Client.Status(ctx)
	if st.Containment != "cgroup2" {
		t.Fatalf("containment %q (%s): this machine has cgroup v2", st.Containment, st.ContainmentReason)
	}
	forkOut, termOut := outPath(t), outPath(t)
	root := spawnAgent(t, d.Client, "coder", 0, "sleep")
	forker := spawnAgent(t, d.Client, "rev-123", root.ID, "double-fork", withEnv("KINTEST_OUT="+forkOut))
	stubborn := spawnAgent(t, d.Client, "rev-124", root.ID, "ignore-term", withEnv("KINTEST_OUT="+termOut))
	grand := spawnAgent(t, d.Client, "rev-123-helper", forker.ID, "sleep")
	grand2 := spawnAgent(t, d.Client, "rev-124-helper", stubborn.ID, "ignore-term")
	orphan, _ := strconv.Atoi(strings.Fields(waitOut(t, forkOut, "orphan "))[1])
	waitOut(t, termOut, "ignoring")
	if !alive(orphan) {
		t.Fatal("the double-forked orphan is not running")
	}
	pids := []int{root.PID, forker.PID, stubborn.PID, grand.PID, grand2.PID, orphan}

	syscall.Kill(root.PID, syscall.SIGKILL)

	r := waitAgent(t, d.Client, root.ID, "recorded as killed", func(a *kin.Agent) bool { return !a.EndedAt.IsZero() })
	if r.State != kin.StateExited || r.Exit == nil || r.Exit.Signal != "killed" || r.EndReason != "crashed" || r.Status != kin.StatusTerminated {
		t.Fatalf("root = %+v exit %+v", r, r.Exit)
	}
	for _, c := range []*kin.Agent{forker, stubborn, grand, grand2} {
		a := waitAgent(t, d.Client, c.ID, "cancelled", stateIs(kin.StateCancelled))
		if a.EndReason != "parent_dead" || a.EndedAt.IsZero() || a.Exit == nil || a.Status != kin.StatusTerminated {
			t.Errorf("%s = %+v", a.Name, a)
		}
	}
	for _, pid := range pids {
		if alive(pid) {
			t.Errorf("process %d survived its parent's death", pid)
		}
	}
	// Seed 001's events, in its shape and order, for each cancelled child.
	for _, c := range []*kin.Agent{forker, stubborn, grand, grand2} {
		evs := events(t, d.Client, kin.EventFilter{Agent: c.ID, Types: []string{kin.EventChildCancel, kin.EventAgentStop}})
		var mine []kin.Event
		for _, e := range evs {
			if e.Agent == c.ID {
				mine = append(mine, e)
			}
		}
		if len(mine) != 2 || mine[0].Type != kin.EventChildCancel || mine[1].Type != kin.EventAgentStop {
			t.Fatalf("events of %s: %v", c.Name, mine)
		}
		if field[kin.AgentID](t, mine[0], "parent") != c.Parent || field[kin.AgentID](t, mine[0], "child") != c.ID || field[string](t, mine[0], "reason") != "parent_dead" {
			t.Errorf("agent.child.cancel = %s", mine[0].Data)
		}
		if field[kin.AgentID](t, mine[1], "agent") != c.ID || field[string](t, mine[1], "status") != "cancelled" {
			t.Errorf("agent.stop = %s", mine[1].Data)
		}
	}
	// History stays: the tree is still there to read.
	tree, err := d.Client.Tree(ctx, root.ID)
	if err != nil || len(tree) != 1 || len(tree[0].Children) != 2 {
		t.Fatalf("tree after death: %v, %v", tree, err)
	}
}

// TestParentDeathWithProcessGroups: where no writable cgroup v2 exists the
// daemon holds agents with process groups and its subreaper sweep, says so,
// and parent death still takes every descendant, orphans included.
func TestParentDeathWithProcessGroups(t *testing.T) {
	d := kintest.StartDaemon(t, kintest.WithContainment("process-groups"))
	st, _ := d.Client.Status(ctx)
	if st.Containment != "process-groups" || st.ContainmentReason == "" {
		t.Fatalf("status = %+v", st)
	}
	forkOut := outPath(t)
	root := spawnAgent(t, d.Client, "coder", 0, "sleep")
	forker := spawnAgent(t, d.Client, "forker", root.ID, "double-fork", withEnv("KINTEST_OUT="+forkOut))
	stubborn := spawnAgent(t, d.Client, "stubborn", forker.ID, "ignore-term")
	orphan, _ := strconv.Atoi(strings.Fields(waitOut(t, forkOut, "orphan "))[1])
	syscall.Kill(root.PID, syscall.SIGKILL)
	for _, c := range []*kin.Agent{forker, stubborn} {
		waitAgent(t, d.Client, c.ID, "cancelled", stateIs(kin.StateCancelled))
	}
	for _, pid := range []int{root.PID, forker.PID, stubborn.PID, orphan} {
		if alive(pid) {
			t.Errorf("process %d survived", pid)
		}
	}
}

func TestDetachedChildSurvivesItsParent(t *testing.T) {
	prof := filepath.Join(t.TempDir(), "detach.json")
	os.WriteFile(prof, []byte(`{"name":"detach","max_generation_depth":5,"max_children":10,"allow_detach":true}`), 0o600)
	d := kintest.StartDaemon(t, kintest.WithProfile(prof))
	root := spawnAgent(t, d.Client, "parent", 0, "sleep")
	detached := spawnAgent(t, d.Client, "detached", root.ID, "sleep", withLife(kin.LifeDetached))
	owned := spawnAgent(t, d.Client, "owned", root.ID, "sleep")
	syscall.Kill(root.PID, syscall.SIGKILL)
	waitAgent(t, d.Client, owned.ID, "cancelled", stateIs(kin.StateCancelled))
	a, _ := d.Client.Agent(ctx, detached.ID)
	if !a.Running() || !alive(detached.PID) || a.Life != kin.LifeDetached {
		t.Fatalf("the detached child did not survive: %+v", a)
	}
	// The default profile does not grant detach.
	d2 := kintest.StartDaemon(t)
	p2 := spawnAgent(t, d2.Client, "parent", 0, "sleep")
	_, err := d2.Client.Spawn(ctx, kin.SpawnRequest{RegisterRequest: kin.RegisterRequest{Name: "d", Parent: p2.ID, Life: kin.LifeDetached}, Command: []string{kintest.AgentBinary(t)}})
	wantCode(t, err, kin.ECodeSpawnNotAllowed)
}

func TestAgentActsOnlyOnItsOwnSubtree(t *testing.T) {
	d := kintest.StartDaemon(t)
	root := spawnAgent(t, d.Client, "root", 0, "sleep")
	sibling := spawnAgent(t, d.Client, "sibling", root.ID, "sleep")
	out := outPath(t)
	agent := spawnAgent(t, d.Client, "agent", root.ID, "spawn-under "+sibling.ID.String(), withEnv("KINTEST_OUT="+out))
	got := waitOut(t, out, "own: ")
	if !strings.Contains(got, "under "+sibling.ID.String()+": forbidden") {
		t.Errorf("spawning under a sibling: %q", got)
	}
	if !strings.Contains(got, "own: parent="+agent.ID.String()) {
		t.Errorf("spawning without --parent must make a child of the caller: %q", got)
	}
	kids, _ := d.Client.Children(ctx, sibling.ID)
	if len(kids) != 0 {
		t.Fatalf("the sibling got a child: %v", kids)
	}
}

// TestSocketOnlyActsForItsAgent: an agent's socket used from a process
// outside the agent is refused; a connection from inside the agent on the
// operator socket acts as the agent, not as the operator.
func TestSocketOnlyActsForItsAgent(t *testing.T) {
	d := kintest.StartDaemon(t)
	out := outPath(t)
	a := spawnAgent(t, d.Client, "coder", 0, "whoami", withEnv("KINTEST_OUT="+out, "KINTEST_OPSOCK="+d.SocketPath()))
	var lines []string
	kintest.WaitFor(t, 10*time.Second, "both whoami answers", func() bool {
		b, _ := os.ReadFile(out)
		lines = strings.Split(strings.TrimSpace(string(b)), "\n")
		return len(lines) >= 2
	})
	if lines[0] != "id:"+a.ID.String() {
		t.Fatalf("whoami from inside the agent on its own socket: %q", lines[0])
	}
	// On the operator socket: an agent running as its own uid cannot even
	// connect (the socket is 0600, the daemon's); one running as the
	// daemon's user connects and is still only itself.
	if d.Config.AgentUIDs {
		if !strings.Contains(lines[1], "permission denied") {
			t.Fatalf("an agent with its own uid reached the operator socket: %q", lines[1])
		}
	} else if lines[1] != "id:"+a.ID.String() {
		t.Fatalf("whoami from inside the agent on the operator socket: %q", lines[1])
	}
	sock := filepath.Join(d.Home, "ctx", "agent", "coder.sock")
	outsider, err := client.New(client.Config{Socket: sock})
	if err != nil {
		t.Fatal(err)
	}
	defer outsider.Close()
	_, err = outsider.Whoami(ctx)
	wantCode(t, err, kin.ECodeForbidden)
	_, err = outsider.Spawn(ctx, kin.SpawnRequest{RegisterRequest: kin.RegisterRequest{Name: "x"}, Command: []string{"/bin/true"}})
	wantCode(t, err, kin.ECodeForbidden)
	if me, err := d.Client.Whoami(ctx); err != nil || me != nil {
		t.Fatalf("the test process on the operator socket is the operator: %v, %v", me, err)
	}
}

// TestOperatorSocketRefusesAgentWithoutOwnUID: where agents run as the
// daemon's own user (AgentUIDs off), a process inside an agent that opens
// the operator socket is refused (issue 18; it acted as the agent before),
// and its own socket still answers it as itself.
func TestOperatorSocketRefusesAgentWithoutOwnUID(t *testing.T) {
	d := kintest.StartDaemon(t, kintest.WithAgentUIDs(false))
	out := outPath(t)
	a := spawnAgent(t, d.Client, "coder", 0, "whoami", withEnv("KINTEST_OUT="+out, "KINTEST_OPSOCK="+d.SocketPath()))
	var lines []string
	kintest.WaitFor(t, 10*time.Second, "both whoami answers", func() bool {
		b, _ := os.ReadFile(out)
		lines = strings.Split(strings.TrimSpace(string(b)), "\n")
		return len(lines) >= 2
	})
	if lines[0] != "id:"+a.ID.String() || !strings.HasPrefix(lines[1], "error forbidden: a process of agent "+a.ID.String()) || !strings.Contains(lines[1], "may not use the operator socket") {
		t.Fatalf("whoami from inside the agent on its socket and on the operator socket: %q", lines)
	}
}

// TestAgentsRunAsTheirOwnUIDs: with the daemon as root, each agent runs as
// the start of the home's uid range + its id, never as root.
func TestAgentsRunAsTheirOwnUIDs(t *testing.T) {
	d := kintest.StartDaemon(t)
	if os.Geteuid() != 0 {
		t.Skip("agents get their own uids only under a root daemon; this test runs as uid", os.Geteuid())
	}
	base := int(d.AgentUIDRange().Start)
	a := spawnAgent(t, d.Client, "one", 0, "sleep")
	b := spawnAgent(t, d.Client, "two", a.ID, "sleep")
	for _, ag := range []*kin.Agent{a, b} {
		st, err := os.ReadFile("/proc/" + strconv.Itoa(ag.PID) + "/status")
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("Uid:\t%d\t%d\t%d\t%d", base+int(ag.ID), base+int(ag.ID), base+int(ag.ID), base+int(ag.ID))
		if !strings.Contains(string(st), want) {
			t.Errorf("agent %d: want %q in\n%s", ag.ID, want, st)
		}
	}
	// An agent cannot read the operator token.
	tok := filepath.Join(d.Home, daemon.TokenName)
	cmd := exec.Command("/bin/cat", tok)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(base + int(a.ID)), Gid: uint32(base + int(a.ID)), Groups: []uint32{}}}
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "Permission denied") {
		t.Fatalf("an agent's uid read the operator token: %s %v", out, err)
	}
}

// frozen reads an agent's own cgroup's freezer state.
func frozen(t *testing.T, root string, path ...kin.AgentID) bool {
	t.Helper()
	dir := root
	for _, id := range path {
		dir = filepath.Join(dir, "a"+id.String())
	}
	b, err := os.ReadFile(filepath.Join(dir, "self", "cgroup.events"))
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Contains(b, []byte("frozen 1"))
}

func TestSuspendFreezesAndResumeThaws(t *testing.T) {
	d := kintest.StartDaemon(t)
	st, _ := d.Client.Status(ctx)
	root := spawnAgent(t, d.Client, "root", 0, "sleep")
	child := spawnAgent(t, d.Client, "child", root.ID, "sleep")

	// Without --cascade only the agent itself (seed 000: children stay active).
	changed, err := d.Client.SetStatus(ctx, kin.StatusRequest{ID: root.ID, Action: kin.ActionSuspend})
	if err != nil || len(changed) != 1 || changed[0].State != kin.StateSuspended {
		t.Fatalf("suspend = %v, %v", changed, err)
	}
	if !frozen(t, st.CgroupRoot, root.ID) || frozen(t, st.CgroupRoot, root.ID, child.ID) {
		t.Fatal("suspend without --cascade must freeze the agent and not its child")
	}
	if _, err := d.Client.SetStatus(ctx, kin.StatusRequest{ID: root.ID, Action: kin.ActionResume}); err != nil {
		t.Fatal(err)
	}
	// With --cascade the whole subtree; the state follows the kernel.
	changed, err = d.Client.SetStatus(ctx, kin.StatusRequest{ID: root.ID, Action: kin.ActionSuspend, Cascade: true})
	if err != nil || len(changed) != 2 {
		t.Fatalf("cascade suspend = %v, %v", changed, err)
	}
	for _, a := range changed {
		if a.State != kin.StateSuspended || a.Status != kin.StatusSuspended {
			t.Fatalf("%s = %s/%s", a.Name, a.Status, a.State)
		}
	}
	if !frozen(t, st.CgroupRoot, root.ID) || !frozen(t, st.CgroupRoot, root.ID, child.ID) {
		t.Fatal("cascade suspend did not freeze the subtree")
	}
	changed, err = d.Client.SetStatus(ctx, kin.StatusRequest{ID: root.ID, Action: kin.ActionResume, Cascade: true})
	if err != nil || len(changed) != 2 || changed[0].State != kin.StateRegistered {
		t.Fatalf("cascade resume = %v, %v", changed, err)
	}
	if frozen(t, st.CgroupRoot, root.ID) || frozen(t, st.CgroupRoot, root.ID, child.ID) {
		t.Fatal("resume did not thaw")
	}
	// Stopping a frozen agent works.
	if _, err := d.Client.SetStatus(ctx, kin.StatusRequest{ID: root.ID, Action: kin.ActionSuspend, Cascade: true}); err != nil {
		t.Fatal(err)
	}
	stopped, err := d.Client.Stop(ctx, kin.StopRequest{ID: root.ID})
	if err != nil || len(stopped) != 2 {
		t.Fatalf("stop frozen = %v, %v", stopped, err)
	}
	if alive(root.PID) || alive(child.PID) {
		t.Fatal("frozen processes survived stop")
	}
}

func TestStopCancelsOwnedSubtree(t *testing.T) {
	d := kintest.StartDaemon(t)
	root := spawnAgent(t, d.Client, "root", 0, "sleep")
	mid := spawnAgent(t, d.Client, "mid", root.ID, "ignore-term")
	leaf := spawnAgent(t, d.Client, "leaf", mid.ID, "sleep")
	zero := kin.Duration(0)
	stopped, err := d.Client.Stop(ctx, kin.StopRequest{ID: mid.ID, Grace: &zero})
	if err != nil || len(stopped) != 2 {
		t.Fatalf("stop = %v, %v", stopped, err)
	}
	for _, a := range stopped {
		if a.State != kin.StateCancelled || a.EndReason != "stopped" {
			t.Errorf("%s = %s %s", a.Name, a.State, a.EndReason)
		}
	}
	if alive(mid.PID) || alive(leaf.PID) || !alive(root.PID) {
		t.Fatal("stop must end the subtree and only it")
	}
	_, err = d.Client.Stop(ctx, kin.StopRequest{ID: mid.ID})
	wantCode(t, err, kin.ECodeInvalidTransition)
	// The name of a stopped agent is free again.
	spawnAgent(t, d.Client, "mid", root.ID, "sleep")
}

func TestLogsAreCaptured(t *testing.T) {
	d := kintest.StartDaemon(t)
	a := spawnAgent(t, d.Client, "talker", 0, "echo hello kin")
	waitAgent(t, d.Client, a.ID, "to exit", func(a *kin.Agent) bool { return !a.EndedAt.IsZero() })
	var buf bytes.Buffer
	if err := d.Client.Logs(ctx, kin.LogsRequest{ID: a.ID}, func(b []byte) error { buf.Write(b); return nil }); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "hello kin\n") || !strings.Contains(buf.String(), "err:hello kin\n") {
		t.Fatalf("log = %q", buf.String())
	}
	// The tail: only the last bytes (the dashboard's log tail).
	whole := buf.String()
	for _, tail := range []int64{1, 5, int64(len(whole)), int64(len(whole)) + 100} {
		buf.Reset()
		if err := d.Client.Logs(ctx, kin.LogsRequest{ID: a.ID, Tail: tail}, func(b []byte) error { buf.Write(b); return nil }); err != nil {
			t.Fatal(err)
		}
		if want := whole[max(0, int64(len(whole))-tail):]; buf.String() != want {
			t.Fatalf("tail %d = %q, want %q", tail, buf.String(), want)
		}
	}
	if err := d.Client.Logs(ctx, kin.LogsRequest{ID: a.ID, Tail: -1}, func([]byte) error { return nil }); kin.ErrorCodeOf(err) != kin.ECodeInvalid {
		t.Fatalf("tail -1: %v", err)
	}
	done, _ := d.Client.Agent(ctx, a.ID)
	if done.State != kin.StateTerminated || done.EndReason != "exited" || done.Exit == nil || done.Exit.Code != 0 {
		t.Fatalf("clean exit = %+v", done)
	}
}

func TestHeartbeatStateMachine(t *testing.T) {
	prof := filepath.Join(t.TempDir(), "fast.json")
	os.WriteFile(prof, []byte(`{"name":"fast","max_generation_depth":3,"max_children":10,"heartbeat":{"window":"100ms","offline_after":3}}`), 0o600)
	d := kintest.StartDaemon(t, kintest.WithProfile(prof))
	parent := register(t, d.Client, kin.RegisterRequest{Name: "orchestrator", Responsible: "x"})
	ext := register(t, d.Client, kin.RegisterRequest{Name: "external", Parent: parent.ID})
	if ext.State != kin.StateRegistered {
		t.Fatal(ext.State)
	}
	a, err := d.Client.Heartbeat(ctx, kin.HeartbeatRequest{ID: ext.ID, Cursor: "page=3"})
	if err != nil || a.State != kin.StateActive || a.Cursor != "page=3" {
		t.Fatalf("first heartbeat = %+v, %v", a, err)
	}
	waitAgent(t, d.Client, ext.ID, "stale", stateIs(kin.StateStale))
	if a, err := d.Client.Heartbeat(ctx, kin.HeartbeatRequest{ID: ext.ID}); err != nil || a.State != kin.StateActive || a.Cursor != "page=3" {
		t.Fatalf("heartbeat from stale = %+v, %v", a, err)
	}
	waitAgent(t, d.Client, ext.ID, "offline", stateIs(kin.StateOffline))
	alerts := events(t, d.Client, kin.EventFilter{Agent: parent.ID, Types: []string{kin.EventAgentOffline}})
	if len(alerts) != 1 || field[kin.AgentID](t, alerts[0], "parent") != parent.ID || field[string](t, alerts[0], "cursor") != "page=3" {
		t.Fatalf("offline alert to the parent = %v", alerts)
	}
	var states []string
	for _, e := range events(t, d.Client, kin.EventFilter{Agent: ext.ID, Types: []string{kin.EventAgentState}}) {
		states = append(states, field[string](t, e, "from")+">"+field[string](t, e, "to"))
	}
	if got := strings.Join(states, " "); got != "registered>active active>stale stale>active active>stale stale>offline" {
		t.Fatalf("transitions = %s", got)
	}
	_, err = d.Client.Heartbeat(ctx, kin.HeartbeatRequest{ID: ext.ID})
	wantCode(t, err, kin.ECodeInvalidTransition) // offline: only a confirmation ends it
	changed, err := d.Client.SetStatus(ctx, kin.StatusRequest{ID: ext.ID, Action: kin.ActionTerminate})
	if err != nil || changed[0].State != kin.StateTerminated {
		t.Fatalf("confirm terminated = %v, %v", changed, err)
	}
	_, err = d.Client.Heartbeat(ctx, kin.HeartbeatRequest{})
	wantCode(t, err, kin.ECodeInvalid) // the operator must name the agent
}

// TestRestartFromCursorWithinIntensity: an agent that crashes is replaced
// with its last cursor, at most max_restarts times in the period; then it
// is marked failed and its parent alerted.
func TestRestartFromCursorWithinIntensity(t *testing.T) {
	prof := filepath.Join(t.TempDir(), "restart.json")
	os.WriteFile(prof, []byte(`{"name":"restart","max_generation_depth":3,"max_children":10,"restart":{"max_restarts":2,"period":"1m"}}`), 0o600)
	d := kintest.StartDaemon(t, kintest.WithProfile(prof))
	parent := spawnAgent(t, d.Client, "parent", 0, "sleep")
	out := outPath(t)
	first := spawnAgent(t, d.Client, "worker", parent.ID, "heartbeat-crash", withRestart(kin.RestartOnFailure), withEnv("KINTEST_OUT="+out))
	var failed *kin.Agent
	kintest.WaitFor(t, 20*time.Second, "the replacements to run out", func() bool {
		evs := events(t, d.Client, kin.EventFilter{Agent: parent.ID, Types: []string{kin.EventAgentFailed}})
		if len(evs) == 0 {
			return false
		}
		failed, _ = d.Client.Agent(ctx, field[kin.AgentID](t, evs[0], "agent"))
		return true
	})
	kids, _ := d.Client.Children(ctx, parent.ID)
	if len(kids) != 3 {
		t.Fatalf("%d workers, want the first and 2 replacements", len(kids))
	}
	for i, k := range kids {
		if k.Name != "worker" || (i > 0 && k.Replaces != kids[i-1].ID) {
			t.Errorf("worker %d = %+v", i, k)
		}
	}
	if failed.ID != kids[2].ID || failed.State != kin.StateFailed {
		t.Fatalf("failed = %+v", failed)
	}
	// Each replacement started from the cursor its predecessor reported.
	got := waitOut(t, out, fmt.Sprintf("resume=c%d", kids[1].ID))
	want := fmt.Sprintf("resume=\nresume=c%d\nresume=c%d\n", first.ID, kids[1].ID)
	if !strings.HasPrefix(got, want) {
		t.Fatalf("resume cursors:\n%s\nwant\n%s", got, want)
	}
}

// TestDaemonKill9MidTree: the daemon is killed with SIGKILL while a tree
// runs; one agent dies while it is down. The restarted daemon re-adopts the
// living, records the dead one lost, cancels its owned child, and leaves
// nothing running unaccounted for. Its agents outlive the killed daemon:
// should the test fail before the restarted one takes them back (or stops
// them), the home's root cgroup is killed when it ends.
func TestDaemonKill9MidTree(t *testing.T) {
	home := kintest.TempHome(t)
	removeHomeCgroup(t, home)
	proc := startDaemonProcess(t, home)
	c, err := client.New(client.Config{Socket: filepath.Join(home, daemon.SocketName)})
	if err != nil {
		t.Fatal(err)
	}
	root := spawnAgent(t, c, "root", 0, "sleep")
	mid := spawnAgent(t, c, "mid", root.ID, "sleep")
	leaf := spawnAgent(t, c, "leaf", mid.ID, "sleep")
	other := spawnAgent(t, c, "other", root.ID, "sleep")
	c.Close()
	proc.Process.Signal(syscall.SIGKILL)
	proc.Wait()
	for _, a := range []*kin.Agent{root, mid, leaf, other} {
		if !alive(a.PID) {
			t.Fatalf("%s died with the daemon", a.Name)
		}
	}
	syscall.Kill(mid.PID, syscall.SIGKILL) // dies while nobody supervises it
	kintest.WaitFor(t, 5*time.Second, "mid to die", func() bool { return !alive(mid.PID) })

	d := kintest.StartDaemon(t, kintest.WithHome(home))
	// It serves at once and checks the agents in the background.
	m := waitAgent(t, d.Client, mid.ID, "checked", func(a *kin.Agent) bool { return !a.Reconciling })
	if m.State != kin.StateExited || m.EndReason != "lost" || m.Exit == nil || m.Exit.Known {
		t.Fatalf("mid = %+v", m)
	}
	l := waitAgent(t, d.Client, leaf.ID, "cancelled", stateIs(kin.StateCancelled))
	if l.EndReason != "parent_dead" || alive(leaf.PID) {
		t.Fatalf("leaf = %+v (alive %v)", l, alive(leaf.PID))
	}
	for _, a := range []*kin.Agent{root, other} {
		got, _ := d.Client.Agent(ctx, a.ID)
		if !got.Running() || !alive(a.PID) {
			t.Fatalf("%s was not re-adopted: %+v", a.Name, got)
		}
	}
	// root, leaf and other were alive: all three re-adopted, then leaf
	// cancelled because its parent was lost.
	if adopted := events(t, d.Client, kin.EventFilter{Types: []string{kin.EventAgentAdopted}}); len(adopted) != 3 {
		t.Fatalf("adopted events = %d", len(adopted))
	}
	if lost := events(t, d.Client, kin.EventFilter{Types: []string{kin.EventAgentLost}}); len(lost) != 1 || lost[0].Agent != mid.ID {
		t.Fatalf("lost events = %v", lost)
	}
	st, _ := d.Client.Status(ctx)
	if st.Running != 2 {
		t.Fatalf("running = %d", st.Running)
	}
	// Re-adopted agents are supervised again: killing the root cancels its child.
	syscall.Kill(root.PID, syscall.SIGKILL)
	o := waitAgent(t, d.Client, other.ID, "cancelled", stateIs(kin.StateCancelled))
	if alive(other.PID) || o.EndReason != "parent_dead" {
		t.Fatalf("other = %+v", o)
	}
	r, _ := d.Client.Agent(ctx, root.ID)
	if r.State != kin.StateExited || r.Exit == nil || r.Exit.Known {
		t.Fatalf("re-adopted root = %+v", r)
	}
}

// startDaemonProcess runs a daemon in a child process (the test binary).
func startDaemonProcess(t *testing.T, home string) *exec.Cmd {
	t.Helper()
	return startDaemonProcessEnv(t, home)
}

// startDaemonProcessEnv is startDaemonProcess with more environment.
func startDaemonProcessEnv(t *testing.T, home string, extra ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = daemonProcessEnv(t, home, extra...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	c, _ := client.New(client.Config{Socket: filepath.Join(home, daemon.SocketName)})
	defer c.Close()
	kintest.WaitFor(t, 20*time.Second, "the daemon process to answer", func() bool {
		_, err := c.Status(ctx)
		return err == nil
	})
	return cmd
}

func TestShutdownStopsAgentsUnlessLeftRunning(t *testing.T) {
	home := kintest.TempHome(t)
	d := kintest.StartDaemon(t, kintest.WithHome(home))
	a := spawnAgent(t, d.Client, "a", 0, "sleep")
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if alive(a.PID) {
		t.Fatal("a clean shutdown left an agent running")
	}
	d2 := kintest.StartDaemon(t, kintest.WithHome(home), kintest.WithLeaveRunning())
	got, _ := d2.Client.Agent(ctx, a.ID)
	if got.State != kin.StateCancelled || got.EndReason != "shutdown" {
		t.Fatalf("after shutdown: %+v", got)
	}
	b := spawnAgent(t, d2.Client, "b", 0, "sleep")
	if err := d2.Close(); err != nil {
		t.Fatal(err)
	}
	if !alive(b.PID) {
		t.Fatal("--leave-running stopped the agent")
	}
	d3 := kintest.StartDaemon(t, kintest.WithHome(home))
	got, _ = d3.Client.Agent(ctx, b.ID)
	if !got.Running() {
		t.Fatalf("not re-adopted: %+v", got)
	}
	if err := d3.Close(); err != nil {
		t.Fatal(err)
	}
	if alive(b.PID) {
		t.Fatal("the re-adopting daemon's shutdown left the agent running")
	}
}

// TestReplacementKeepsItsOwnPolicyAndStage: an agent that asked for less
// than its parent has (its own policy, its stage) and crashed is replaced
// with the same own policy and stage, not with its parent's: before, the
// replacement registered with neither and got everything its parent had
// (exec, here), what the agent itself had given up.
func TestReplacementKeepsItsOwnPolicyAndStage(t *testing.T) {
	d := kintest.StartDaemon(t)
	parent := register(t, d.Client, kin.RegisterRequest{Name: "lead", Responsible: "t", Stage: "supervised"})
	w := spawnAgent(t, d.Client, "narrow", parent.ID, "exit 1", func(r *kin.SpawnRequest) {
		r.Restart = kin.RestartOnFailure
		r.Stage = "restricted"
		r.Policy = &kin.Policy{Tools: &kin.ToolRules{Allow: []string{"read"}}}
	})
	var repl kin.AgentID
	kintest.WaitFor(t, 20*time.Second, "the crashed agent's replacement", func() bool {
		evs, _ := d.Client.Events(ctx, kin.EventFilter{Types: []string{kin.EventAgentReplaced}, Agent: w.ID})
		for _, e := range evs {
			if e.Agent == w.ID {
				_ = e.Field("replacement", &repl)
			}
		}
		return repl != 0
	})
	if dec := authorize(t, d, parent.ID, "exec"); !dec.Allowed {
		t.Fatalf("the supervised parent may not exec: %+v", dec)
	}
	for _, tool := range []string{"exec", "memory_search"} { // its stage denies exec; its own policy, all but read
		if dec := authorize(t, d, repl, tool); dec.Allowed {
			t.Errorf("the replacement may %s: %+v; the agent it replaces could not (stage restricted, its own policy)", tool, dec)
		}
	}
	if dec := authorize(t, d, repl, "read"); !dec.Allowed {
		t.Errorf("the replacement may not read: %+v", dec)
	}
	pol, err := d.Client.Policy(ctx, repl)
	if err != nil {
		t.Fatal(err)
	}
	if pol.Stage != "restricted" || pol.Requested == nil || pol.Requested.Tools == nil || !slices.Equal(pol.Requested.Tools.Allow, []string{"read"}) {
		t.Errorf("the replacement's stage %q and own policy %+v; want restricted and the original's", pol.Stage, pol.Requested)
	}
}
