package fleettest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/internal/proctest"
	"github.com/kin-agents/kin/kin"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

// spawnSleeper spawns a root agent running sleep through h and returns it
// (running, with its pid).
func spawnSleeper(t *testing.T, h *Host, name string) *kin.Agent {
	t.Helper()
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, err := h.Client.Spawn(ctx, kin.SpawnRequest{
		RegisterRequest: kin.RegisterRequest{Name: name, Responsible: "fleettest"},
		Command:         []string{sleep, "3600"},
	})
	if err != nil {
		t.Fatalf("spawn %s on host %s: %v", name, h.Name, err)
	}
	if a.PID == 0 {
		t.Fatalf("agent %s on host %s has no pid: %+v", name, h.Name, a)
	}
	return a
}

// netnsOf is the network namespace of pid, as /proc shows it.
func netnsOf(t *testing.T, pid int) string {
	t.Helper()
	l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// inode is the namespace a /run/netns file names, as /proc shows it.
func namedNetns(t *testing.T, name string) string {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(netnsDir+"/"+name, &st); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("net:[%d]", st.Ino)
}

func TestThreeHostsShareOneStore(t *testing.T) {
	f := Start(t)
	t.Logf("fleet %s up in %v: network %v, store %v, hosts %v (the kin binary's build the rest)",
		f.Tag, f.Took.Total.Round(time.Millisecond), f.Took.Network.Round(time.Millisecond),
		f.Took.Store.Round(time.Millisecond), f.Took.Hosts.Round(time.Millisecond))
	if len(f.Hosts) != 3 {
		t.Fatalf("%d hosts, want 3", len(f.Hosts))
	}
	ctx := context.Background()
	ranges := map[string]string{}
	for _, h := range f.Hosts {
		st, err := h.Client.Status(ctx)
		if err != nil {
			t.Fatalf("host %s: status over its socket: %v", h.Name, err)
		}
		info := h.Info()
		// Entered with nsenter --net only: the machine's cgroup v2 mount
		// is the daemon's to contain agents with.
		if st.Containment != "cgroup2" || info.Containment != "cgroup2" {
			t.Errorf("host %s: containment %q (start-up line %q, %s), want cgroup2", h.Name, st.Containment, info.Containment, info.ContainmentReason)
		}
		if info.HTTP != h.HTTP {
			t.Errorf("host %s serves HTTP on %q, want %q", h.Name, info.HTTP, h.HTTP)
		}
		if got, want := netnsOf(t, h.Pid()), namedNetns(t, h.Netns); got != want {
			t.Errorf("host %s: its daemon is in %s, want its namespace %s", h.Name, got, want)
		}
		if prev, ok := ranges[info.AgentUIDRange]; ok || info.AgentUIDRange == "" {
			t.Errorf("host %s has agent uid range %q, like host %s: the fleet shares one uid range directory", h.Name, info.AgentUIDRange, prev)
		}
		ranges[info.AgentUIDRange] = h.Name
		// The store's password is in no line kin prints.
		status := h.Exec(t, "status")
		for what, s := range map[string]string{"the start-up line": h.Line(), "kin status": status, "the daemon's log": h.Stderr()} {
			if strings.Contains(s, f.StorePassword) {
				t.Errorf("host %s: %s shows the store's password", h.Name, what)
			}
		}
		if !strings.Contains(info.Store, f.Gateway.String()) {
			t.Errorf("host %s: store %q, want the fleet's server on %s", h.Name, info.Store, f.Gateway)
		}
	}

	// One registry: an agent registered through a is listed by b and c.
	a, b, c := f.Host(t, "a"), f.Host(t, "b"), f.Host(t, "c")
	root, err := a.Client.Register(ctx, kin.RegisterRequest{Name: "registered-on-a", Responsible: "fleettest"})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := c.Client.Agent(ctx, root.ID); err != nil || got.Name != "registered-on-a" {
		t.Errorf("host c: agent %d: %+v, %v", root.ID, got, err)
	}
	if out := b.Exec(t, "ps"); !strings.Contains(out, "registered-on-a") {
		t.Errorf("host b's kin ps lacks the agent registered on a:\n%s", out)
	}

	// An agent spawned on b runs in b's namespace, as b's uid range
	// says, and a lists it; its environment holds no store password.
	sleeper := spawnSleeper(t, b, "sleeper-on-b")
	if got, want := netnsOf(t, sleeper.PID), namedNetns(t, b.Netns); got != want {
		t.Errorf("b's agent runs in %s, want b's namespace %s", got, want)
	}
	if env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", sleeper.PID)); err != nil {
		t.Error(err)
	} else if strings.Contains(string(env), f.StorePassword) {
		t.Error("an agent's environment holds the store's password")
	}
	var uidStart, uidCount int
	fmt.Sscanf(b.Info().AgentUIDRange, "%d:%d", &uidStart, &uidCount)
	if st, err := os.Stat(fmt.Sprintf("/proc/%d", sleeper.PID)); err == nil {
		if uid := int(st.Sys().(*syscall.Stat_t).Uid); uid != uidStart+int(sleeper.ID) {
			t.Errorf("b's agent %d runs as uid %d, want %d (b's range %s)", sleeper.ID, uid, uidStart+int(sleeper.ID), b.Info().AgentUIDRange)
		}
	}
	if out := a.Exec(t, "ps"); !strings.Contains(out, "sleeper-on-b") {
		t.Errorf("host a's kin ps lacks the agent spawned on b:\n%s", out)
	}
}

func TestHostsReachTheStoreAndOneAnotherOverTheBridge(t *testing.T) {
	f := Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store := f.DB.Addr().String()
	for _, h := range f.Hosts {
		if err := h.CanDial(ctx, store); err != nil {
			t.Errorf("host %s cannot reach the store at %s: %v", h.Name, store, err)
		}
		// A host's loopback is its own: nothing listens on another's.
		if err := h.CanDial(ctx, "127.0.0.1:5432"); err == nil {
			t.Errorf("host %s reaches a server on its own loopback: the store is the machine's, not the namespace's", h.Name)
		}
	}
	a, b := f.Host(t, "a"), f.Host(t, "b")
	// a calls b's HTTP API over the bridge, with b's operator token.
	hc := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) { return a.Dial(ctx, addr) },
	}}
	for _, tc := range []struct {
		token string
		want  int
	}{{b.Token, http.StatusOK}, {"", http.StatusUnauthorized}} {
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+b.HTTP+"/v1/status", nil)
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("a -> b's HTTP API: %v", err)
		}
		var st kin.DaemonStatus
		json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("a -> b's /v1/status with token %v: %s, want %d", tc.token != "", resp.Status, tc.want)
		}
		if tc.want == http.StatusOK && st.Home != b.Home {
			t.Errorf("a -> %s answered as home %q, want b's %q", b.HTTP, st.Home, b.Home)
		}
	}
}

func TestCutLinkLosesTheStoreAndRestoreLinkBringsItBack(t *testing.T) {
	f := Start(t)
	a, b := f.Host(t, "a"), f.Host(t, "b")
	store := f.DB.Addr().String()
	dial := func(h *Host, addr string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return h.CanDial(ctx, addr)
	}
	b.CutLink(t)
	if err := dial(b, store); err == nil {
		t.Fatal("b reaches the store with its link cut")
	} else {
		t.Logf("b -> store with its link cut: %v", err)
	}
	if err := dial(b, a.HTTP); err == nil {
		t.Error("b reaches a with its link cut")
	}
	if err := dial(a, store); err != nil {
		t.Errorf("a lost the store when b's link was cut: %v", err)
	}
	if err := dial(a, b.HTTP); err == nil {
		t.Error("a reaches b, whose link is cut")
	}
	// The daemon: a write through b cannot reach the store.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t0 := time.Now()
	_, err := b.Client.Register(ctx, kin.RegisterRequest{Name: "during-the-cut", Responsible: "fleettest"})
	cancel()
	if err == nil {
		t.Error("b registered an agent with its link to the store cut")
	}
	t.Logf("register through b with its link cut: %v after %v", err, time.Since(t0).Round(time.Millisecond))

	b.RestoreLink(t)
	if err := dial(b, store); err != nil {
		t.Fatalf("b cannot reach the store after RestoreLink: %v", err)
	}
	if err := dial(a, b.HTTP); err != nil {
		t.Errorf("a cannot reach b after RestoreLink: %v", err)
	}
	t0 = time.Now()
	var id kin.AgentID
	kintest.WaitFor(t, 2*time.Minute, "a registration through b after RestoreLink", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ag, err := b.Client.Register(ctx, kin.RegisterRequest{Name: "after-the-cut", Responsible: "fleettest"})
		if err == nil {
			id = ag.ID
		}
		return err == nil
	})
	t.Logf("b's daemon wrote to the store again %v after RestoreLink", time.Since(t0).Round(time.Millisecond))
	if got, err := a.Client.Agent(context.Background(), id); err != nil || got.Name != "after-the-cut" {
		t.Errorf("a does not see what b registered after the cut: %+v, %v", got, err)
	}
}

func TestKill9LeavesAgentsAndRestartComesBackOnTheSameHome(t *testing.T) {
	f := Start(t)
	a, b := f.Host(t, "a"), f.Host(t, "b")
	ag := spawnSleeper(t, a, "outlives-its-daemon")
	before := a.Info()
	oldPid, oldToken := a.Pid(), a.Token

	a.Kill9(t)
	if a.Running() || proctest.Alive(oldPid) {
		t.Fatalf("a's daemon (pid %d) survived Kill9", oldPid)
	}
	if !proctest.Alive(ag.PID) {
		t.Fatalf("a's agent (pid %d) died with its daemon", ag.PID)
	}
	// The store still says it runs: b reads it there.
	if got, err := b.Client.Agent(context.Background(), ag.ID); err != nil || !got.Running() {
		t.Errorf("b: a's agent after a's kill -9: %+v, %v", got, err)
	}

	a.Restart(t)
	if a.Pid() == oldPid || !a.Running() {
		t.Fatalf("a's daemon did not restart (pid %d, was %d)", a.Pid(), oldPid)
	}
	after := a.Info()
	if after.Home != before.Home || after.CgroupRoot != before.CgroupRoot || after.AgentUIDRange != before.AgentUIDRange || a.Token != oldToken {
		t.Errorf("a restarted on another home: %+v (token changed: %v), was %+v", after, a.Token != oldToken, before)
	}
	if got, want := netnsOf(t, a.Pid()), namedNetns(t, a.Netns); got != want {
		t.Errorf("a's new daemon runs in %s, want a's namespace %s", got, want)
	}
	var got *kin.Agent
	kintest.WaitFor(t, time.Minute, "a's new daemon to re-adopt its agent", func() bool {
		var err error
		got, err = a.Client.Agent(context.Background(), ag.ID)
		return err == nil && !got.Reconciling
	})
	if !got.Running() || got.PID != ag.PID || !proctest.Alive(ag.PID) {
		t.Errorf("after the restart a's agent is %+v (process alive: %v), want it re-adopted, running as pid %d", got, proctest.Alive(ag.PID), ag.PID)
	}
	if err := a.Stop(); err != nil {
		t.Errorf("stop a: %v", err)
	}
	if proctest.Alive(ag.PID) {
		t.Errorf("a's agent (pid %d) outlived a clean stop of its daemon", ag.PID)
	}
}

// left is what a fleet made, to check that none of it is left.
type left struct {
	Tag, Bridge, Dir, PGDir string
	Netns, Veths, Cgroups   []string
	Pids                    []int // daemons, agents, the store's server
}

func (l *left) record(f *Fleet, agents ...*kin.Agent) {
	l.Tag, l.Bridge, l.Dir, l.PGDir = f.Tag, f.Bridge, f.Dir, f.DB.Dir()
	l.Pids = append(l.Pids, f.DB.Pid())
	for _, h := range f.Hosts {
		l.Netns = append(l.Netns, h.Netns)
		l.Veths = append(l.Veths, h.Veth)
		l.Cgroups = append(l.Cgroups, h.CgroupRoots()...)
		l.Pids = append(l.Pids, h.DaemonPids()...)
	}
	for _, a := range agents {
		l.Pids = append(l.Pids, a.PID)
	}
}

// check fails t for each thing l names that is still there.
func (l *left) check(t *testing.T) {
	t.Helper()
	for _, ns := range l.Netns {
		if _, err := os.Stat(netnsDir + "/" + ns); err == nil {
			t.Errorf("namespace %s is left", ns)
		}
	}
	for _, link := range append([]string{l.Bridge}, l.Veths...) {
		if _, err := net.InterfaceByName(link); err == nil {
			t.Errorf("link %s is left", link)
		}
	}
	for _, cg := range l.Cgroups {
		if _, err := os.Stat(cg); err == nil {
			t.Errorf("cgroup %s is left", cg)
		}
	}
	for _, pid := range l.Pids {
		if proctest.Alive(pid) {
			t.Errorf("process %d is left", pid)
		}
	}
	for _, d := range []string{l.Dir, l.PGDir} {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("directory %s is left (%v)", d, err)
		}
	}
	for _, link := range links() {
		if strings.HasPrefix(link, "kb"+l.Tag) || strings.HasPrefix(link, "kv"+l.Tag) {
			t.Errorf("link %s is left", link)
		}
	}
}

func TestNothingIsLeftBehind(t *testing.T) {
	var (
		l left
		f *Fleet
	)
	var t0 time.Time
	t.Run("fleet", func(t *testing.T) {
		f = Start(t)
		var agents []*kin.Agent
		for _, h := range f.Hosts {
			agents = append(agents, spawnSleeper(t, h, "left-on-"+h.Name))
		}
		// The worst case: c's daemon killed (its agent left running for
		// the teardown to kill), b cut off from the store.
		f.Host(t, "c").Kill9(t)
		f.Host(t, "b").CutLink(t)
		l.record(f, agents...)
		if len(l.Cgroups) != 3 {
			t.Errorf("cgroup roots %v, want one per host", l.Cgroups)
		}
		t0 = time.Now()
	})
	took := time.Since(t0)
	l.check(t)
	t.Logf("fleet up in %v (network %v, store %v, hosts %v); torn down in %v (cleanup %v)",
		f.Took.Total.Round(time.Millisecond), f.Took.Network.Round(time.Millisecond), f.Took.Store.Round(time.Millisecond),
		f.Took.Hosts.Round(time.Millisecond), took.Round(time.Millisecond), f.TeardownTook.Round(time.Millisecond))
}

// The helper test (TestHelperFleet), run in a child test binary, reads
// these.
const (
	envHelperOut  = "KIN_FLEETTEST_HELPER_OUT"  // where it writes its left, as JSON
	envHelperHang = "KIN_FLEETTEST_HELPER_HANG" // 1: it then waits to be killed
)

// TestHelperFleet is run by the tests below in a child test binary: it
// starts a one-host fleet with an agent, reports what it made, and maybe
// waits to be killed.
func TestHelperFleet(t *testing.T) {
	out := os.Getenv(envHelperOut)
	if out == "" {
		t.Skip("run by the tests of a killed test binary and of a missing tool")
	}
	f := Start(t, WithHosts("solo"))
	var l left
	l.record(f, spawnSleeper(t, f.Hosts[0], "orphan"))
	b, _ := json.Marshal(l)
	if err := os.WriteFile(out+".tmp", b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(out+".tmp", out); err != nil {
		t.Fatal(err)
	}
	if os.Getenv(envHelperHang) == "1" {
		<-make(chan struct{}) // until kill -9
	}
}

// child runs TestHelperFleet in a copy of this test binary with env.
func child(env ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperFleet$", "-test.v", "-test.count=1")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, EnvRequire+"=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	return cmd
}

func TestSweepRemovesWhatAKilledTestBinaryLeft(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a fleet needs root")
	}
	out := filepath.Join(t.TempDir(), "left.json")
	cmd := child(envHelperOut+"="+out, envHelperHang+"=1")
	var stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-exited })
	var l left
	kintest.WaitFor(t, 3*time.Minute, "the helper's report", func() bool {
		b, err := os.ReadFile(out)
		if err != nil {
			select {
			case <-exited:
				t.Fatalf("the helper exited without a report:\n%s", stderr.String())
			default:
			}
			return false
		}
		if err := json.Unmarshal(b, &l); err != nil {
			t.Fatal(err)
		}
		return true
	})
	t.Cleanup(func() { sweep() }) // should the checks below fail

	cmd.Process.Kill() // SIGKILL: no cleanup runs
	<-exited
	daemon, store, agent := l.Pids[1], l.Pids[0], l.Pids[2]
	kintest.WaitFor(t, 30*time.Second, "the daemon and the store's server to die with their test binary (PDEATHSIG)", func() bool {
		return !proctest.Alive(daemon) && !proctest.Alive(store)
	})
	if !proctest.Alive(agent) {
		t.Fatalf("the agent (pid %d) died with its daemon: nothing left to sweep", agent)
	}
	if _, err := os.Stat(netnsDir + "/" + l.Netns[0]); err != nil {
		t.Fatalf("the namespace is gone already (%v): nothing left to sweep", err)
	}

	sweep()
	kintest.WaitFor(t, 30*time.Second, "the agent to be gone", func() bool { return !proctest.Alive(agent) })
	l.check(t)
}

func TestStartSkipsWithoutWhatItNeedsUnlessRequired(t *testing.T) {
	out := filepath.Join(t.TempDir(), "left.json")
	nowhere := "PATH=" + filepath.Join(t.TempDir(), "empty")
	b, err := child(envHelperOut+"="+out, nowhere).CombinedOutput()
	if err != nil || !strings.Contains(string(b), "--- SKIP: TestHelperFleet") || !strings.Contains(string(b), "a fleet needs") {
		t.Errorf("without ip (or root) the test should skip, naming what is missing (%v):\n%s", err, b)
	}
	b, err = child(envHelperOut+"="+out, nowhere, EnvRequire+"=1").CombinedOutput()
	if err == nil || !strings.Contains(string(b), "--- FAIL: TestHelperFleet") || !strings.Contains(string(b), EnvRequire+"=1") {
		t.Errorf("with %s=1 a missing tool should fail the test (%v):\n%s", EnvRequire, err, b)
	}
}

func TestOptionsAreChecked(t *testing.T) {
	for _, tc := range []struct {
		opts []Option
		want string
	}{
		{[]Option{WithHosts()}, "1 to 9 hosts"},
		{[]Option{WithHosts("a", "b", "c", "d", "e", "f", "g", "h", "i", "j")}, "1 to 9 hosts"},
		{[]Option{WithHosts("A")}, `host name "A"`},
		{[]Option{WithHosts("a/b")}, `host name "a/b"`},
		{[]Option{WithHosts("a", "a")}, `"a" twice`},
		{[]Option{WithHostServeArgs("z", "--profile", "hierarchy")}, `host "z", which the fleet lacks`},
	} {
		cfg := config{hosts: DefaultHosts}
		for _, o := range tc.opts {
			o(&cfg)
		}
		if err := cfg.validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error saying %q", cfg, err, tc.want)
		}
	}
	cfg := config{hosts: DefaultHosts}
	WithHostServeArgs("b", "--profile", "hierarchy")(&cfg)
	if err := cfg.validate(); err != nil {
		t.Errorf("the defaults with flags for b: %v", err)
	}
}
