package daemon_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kin-agents/kin/client"
	"github.com/kin-agents/kin/internal/ctxfs"
	"github.com/kin-agents/kin/internal/daemon"
	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/internal/supervisor/cgroup"
	"github.com/kin-agents/kin/internal/uidrange"
	"github.com/kin-agents/kin/kin"
)

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("agent uid ranges are a root daemon's; this test runs as uid", os.Geteuid())
	}
}

// sessionDir is agent a's session directory under d's agent filesystem.
func sessionDir(t *testing.T, d *kintest.Daemon, a *kin.Agent) string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(d.CtxRoot(), "home", "*", "agent", a.Name, "session", ctxfs.DefaultSession))
	if len(m) != 1 {
		t.Fatalf("the session of %s under %s: %v", a.Name, d.CtxRoot(), m)
	}
	return m[0]
}

// TestTwoDaemonsOnOneHost: two root daemons sharing the host's allocation
// directory get disjoint uid ranges, and an agent of one can neither read
// nor list an agent of the other's session, nor append to it, nor signal
// its process; the target stays alive and unchanged. With one uid base for
// every home (before uid ranges) agent #1 of each daemon had the same uid
// and every one of these attempts succeeded.
func TestTwoDaemonsOnOneHost(t *testing.T) {
	needRoot(t)
	host := t.TempDir()
	d1 := kintest.StartDaemon(t, kintest.WithUIDRangeDir(host))
	d2 := kintest.StartDaemon(t, kintest.WithUIDRangeDir(host))
	r1, r2 := d1.AgentUIDRange(), d2.AgentUIDRange()
	if r1 == nil || r2 == nil || r1.Overlaps(*r2) {
		t.Fatalf("uid ranges %v and %v are not disjoint", r1, r2)
	}
	ctx := context.Background()
	for _, d := range []*kintest.Daemon{d1, d2} {
		st, err := d.Client.Status(ctx)
		if err != nil || st.AgentUIDRange != d.AgentUIDRange().String() {
			t.Fatalf("status says agent uid range %q (%v); want %v", st.AgentUIDRange, err, d.AgentUIDRange())
		}
	}

	// Each attacker has the same agent id as its victim (#1 of d2 against
	// #1 of d1, #2 of d1 against #2 of d2): the same uid when every home
	// shared one base.
	for _, at := range []struct{ from, vd *kintest.Daemon }{{d2, d1}, {d1, d2}} {
		victim := spawnAgent(t, at.vd.Client, "victim", 0, "sleep")
		dir := sessionDir(t, at.vd, victim)
		key, meta := filepath.Join(dir, ctxfs.FileAgentKey), filepath.Join(dir, ctxfs.FileMeta)
		before := map[string][]byte{}
		for _, p := range []string{key, meta} {
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatalf("the victim's %s: %v", p, err)
			}
			before[p] = b
		}
		out := outPath(t)
		mode := fmt.Sprintf("trespass read:%s read:%s list:%s append:%s kill:%d", key, meta, dir, meta, victim.PID)
		attacker := spawnAgent(t, at.from.Client, "attacker", 0, mode, withEnv("KINTEST_OUT="+out))
		if attacker.ID != victim.ID {
			t.Fatalf("attacker is #%d, victim #%d: the test wants them equal", attacker.ID, victim.ID)
		}
		got := waitOut(t, out, "trespass done")
		for _, line := range strings.Split(strings.TrimSpace(got), "\n") {
			if line == "trespass done" {
				continue
			}
			if !strings.HasSuffix(line, "permission denied") && !strings.HasSuffix(line, "operation not permitted") {
				t.Errorf("agent #%d of %s against agent #%d of %s: %q, want EACCES or EPERM", attacker.ID, at.from.Home, victim.ID, at.vd.Home, line)
			}
		}
		if !alive(victim.PID) {
			t.Errorf("victim %d (pid %d) was killed", victim.ID, victim.PID)
		}
		if a, err := at.vd.Client.Agent(ctx, victim.ID); err != nil || !a.Running() {
			t.Errorf("victim %d: %+v, %v; want it running", victim.ID, a, err)
		}
		for p, b := range before {
			if now, err := os.ReadFile(p); err != nil || !bytes.Equal(now, b) {
				t.Errorf("the victim's %s changed (%v)", p, err)
			}
		}
	}
}

// TestUIDRangeOverlapRefused: a daemon asked for a range that overlaps
// another daemon's does not start, and says whose range it is.
func TestUIDRangeOverlapRefused(t *testing.T) {
	needRoot(t)
	host := t.TempDir()
	d1 := kintest.StartDaemon(t, kintest.WithUIDRangeDir(host))
	r := d1.AgentUIDRange()
	cfg := daemon.DefaultConfig()
	cfg.Home, cfg.HTTPAddr, cfg.UIDRangeDir = t.TempDir(), "off", host
	cfg.UIDRange = uidrange.Range{Start: r.Start + 10, Count: 100}.String()
	d, err := daemon.Start(context.Background(), cfg)
	if err == nil {
		d.Close()
		t.Fatal("a daemon started with a uid range overlapping another daemon's")
	}
	for _, want := range []string{d1.Home, cfg.Home, r.String(), "--uid-range"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
}

// TestUIDRangeHostUserRefused: a range holding a user of /etc/passwd (made
// here with useradd) is refused at start, naming the user.
func TestUIDRangeHostUserRefused(t *testing.T) {
	needRoot(t)
	if _, err := exec.LookPath("useradd"); err != nil {
		t.Skip("useradd is not installed")
	}
	const name, uid = "kinuidrange1", 3900017
	if out, err := exec.Command("useradd", "--no-create-home", "--uid", strconv.Itoa(uid), "--user-group", name).CombinedOutput(); err != nil {
		t.Fatalf("useradd: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("userdel", name).CombinedOutput(); err != nil {
			t.Errorf("userdel %s: %v: %s", name, err, out)
		}
	})
	cfg := daemon.DefaultConfig()
	cfg.Home, cfg.HTTPAddr, cfg.UIDRangeDir = t.TempDir(), "off", t.TempDir()
	cfg.UIDRange = "3900000:100"
	d, err := daemon.Start(context.Background(), cfg)
	if err == nil {
		d.Close()
		t.Fatal("a daemon started with a uid range holding user " + name)
	}
	if want := fmt.Sprintf("user %s (uid %d) in /etc/passwd", name, uid); !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not name %q", err, want)
	}
}

// TestUIDRangeKeptAcrossRestart: a restarted daemon keeps its home's range,
// also when the host's allocation file lists another daemon by then.
func TestUIDRangeKeptAcrossRestart(t *testing.T) {
	needRoot(t)
	host := t.TempDir()
	d1 := kintest.StartDaemon(t, kintest.WithUIDRangeDir(host))
	home, r := d1.Home, *d1.AgentUIDRange()
	a := spawnAgent(t, d1.Client, "one", 0, "sleep")
	if err := d1.Close(); err != nil {
		t.Fatal(err)
	}
	kintest.StartDaemon(t, kintest.WithUIDRangeDir(host)) // another daemon meanwhile
	d2 := kintest.StartDaemon(t, kintest.WithUIDRangeDir(host), kintest.WithHome(home))
	if got := *d2.AgentUIDRange(); got != r {
		t.Fatalf("after a restart the home has range %v, before %v", got, r)
	}
	// Its old agent's files are still owned by that agent's uid.
	fi, err := os.Stat(sessionDir(t, d2, a))
	if err != nil {
		t.Fatal(err)
	}
	if uid := fi.Sys().(*syscall.Stat_t).Uid; uid != r.Start+uint32(a.ID) {
		t.Errorf("agent %d's session is owned by uid %d, want %d", a.ID, uid, r.Start+uint32(a.ID))
	}
}

// TestCgroupRootsNeverNest: a root daemon started as an agent of another
// (so its own cgroup lies in the other's tree) puts its kin root cgroup
// outside that tree, so that neither daemon's cascades reach the other's
// agents. Before, it made its root under its own cgroup: inside the other's.
func TestCgroupRootsNeverNest(t *testing.T) {
	needRoot(t)
	outer := kintest.StartDaemon(t, kintest.WithAgentUIDs(false), kintest.WithContainment("cgroup2"))
	ctx := context.Background()
	st, err := outer.Client.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	homeB := kintest.TempHome(t)
	inner := spawnAgent(t, outer.Client, "inner-daemon", 0, "daemon "+homeB)
	cB, err := client.New(client.Config{Socket: filepath.Join(homeB, daemon.SocketName)})
	if err != nil {
		t.Fatal(err)
	}
	defer cB.Close()
	var stB *kin.DaemonStatus
	kintest.WaitFor(t, 20*time.Second, "the inner daemon to answer", func() bool {
		stB, err = cB.Status(ctx)
		return err == nil
	})
	t.Cleanup(func() {
		// Stopping the agent stops the inner daemon with SIGTERM; it then
		// removes its root. Should it not have, remove it here.
		outer.Client.Stop(ctx, kin.StopRequest{ID: inner.ID})
		kintest.WaitFor(t, 20*time.Second, "the inner daemon to exit", func() bool { return !alive(inner.PID) })
		if stB.CgroupRoot != "" {
			os.Remove(stB.CgroupRoot)
		}
	})
	own, err := os.ReadFile("/proc/" + strconv.Itoa(inner.PID) + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(own), strings.TrimPrefix(st.CgroupRoot, mountDir(t))+"/") {
		t.Fatalf("the inner daemon (cgroup %s) does not run inside the outer daemon's root %s", own, st.CgroupRoot)
	}
	// An agent's sandbox keeps the cgroup2 mount read-only (issue 18), so
	// the inner daemon, an agent, cannot make a root there at all and
	// contains by PID namespaces instead: that never nests either.
	if stB.Containment != "cgroup2" {
		if stB.CgroupRoot != "" || !strings.Contains(stB.ContainmentReason, "inside the kin root cgroup") {
			t.Fatalf("the inner daemon contains by %s (%s), root %q", stB.Containment, stB.ContainmentReason, stB.CgroupRoot)
		}
		return
	}
	if stB.CgroupRoot == st.CgroupRoot || strings.HasPrefix(stB.CgroupRoot, st.CgroupRoot+"/") || strings.HasPrefix(st.CgroupRoot, stB.CgroupRoot+"/") {
		t.Errorf("cgroup roots nest: outer %s, inner %s", st.CgroupRoot, stB.CgroupRoot)
	}
}

// mountDir is the cgroup2 mount's directory, the prefix of the kin roots.
func mountDir(t *testing.T) string {
	t.Helper()
	m, err := cgroup.FindMount()
	if err != nil {
		t.Skip("no cgroup2 mount:", err)
	}
	return m.Dir
}
