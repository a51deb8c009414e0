package daemon_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kin-agents/kin/client"
	"github.com/kin-agents/kin/internal/ctxfs"
	"github.com/kin-agents/kin/internal/daemon"
	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/kin"
)

// TestAttackRebuildAfterBootLeavesSessionFilesEmpty: the agent filesystem
// is no longer synced file by file; after a crash of the machine any file
// kin wrote since the last writeback may be empty, and a daemon on a new
// boot claims to rewrite the tree from the store. Every file kin wrote
// into an agent's session and control directory (not the agent: nothing
// here writes) must hold its content again once the daemon caught up, the
// sessions' own files (meta.json, cwd, created_at, agent.key) and the
// parent's context/child/<name>/ files included.
func TestAttackRebuildAfterBootLeavesSessionFilesEmpty(t *testing.T) {
	home := kintest.TempHome(t)
	d := kintest.StartDaemon(t, kintest.WithHome(home))
	p := spawnAgent(t, d.Client, "boot-parent", 0, "sleep")
	c := spawnAgent(t, d.Client, "boot-child", p.ID, "sleep")
	root := filepath.Join(home, "ctx")
	caughtUp := func(d *kintest.Daemon) {
		t.Helper()
		st, err := d.Client.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		kintest.WaitFor(t, 30*time.Second, "the tree to catch up with the store", func() bool {
			b, _ := os.ReadFile(filepath.Join(root, ".kin-synced"))
			n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			return n >= st.LastEvent
		})
	}
	caughtUp(d)
	var dirs []string
	for _, a := range []*kin.Agent{p, c} {
		dirs = append(dirs, filepath.Join(root, "home", uidOf(d, a.ID), "agent", a.Name, "session", a.Session))
		// Served control files (ctxfuse) are not on the disk to lose:
		// they are answered from the store.
		if !d.ServedControl() {
			dirs = append(dirs, filepath.Join(root, "agent", a.Name+".d"))
		}
	}
	// Every non-empty file kin wrote there, and what it held.
	before := map[string]int{}
	for _, dir := range dirs {
		filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
			// pid is empty once no process runs: rightly so after a boot.
			// agent.key is the private key, which kin does not keep (only
			// its public half): an agent that died with the machine has no
			// use for it, and nothing could restore it (ctxfs/repair.go).
			if err == nil && e.Type().IsRegular() && e.Name() != "pid" && e.Name() != ctxfs.FileAgentKey {
				if st, err := os.Stat(path); err == nil && st.Size() > 0 {
					before[path] = int(st.Size())
				}
			}
			return nil
		})
	}
	if len(before) < 10 {
		t.Fatalf("only %d files in %v", len(before), dirs)
	}
	d.Close()

	// What a power loss may leave of files written without fsync: there,
	// but empty. And the boot id of another boot.
	for path := range before {
		if err := os.Truncate(path, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(home, "ctx-boot"), []byte("00000000-0000-0000-0000-000000000000\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d = kintest.StartDaemon(t, kintest.WithHome(home))
	defer d.Close()
	caughtUp(d)
	// The agents' processes died with the "machine": the daemon may have
	// ended them since, which rewrites some files; a file left empty is
	// one the rebuild never writes.
	var empty []string
	for path := range before {
		st, err := os.Stat(path)
		if err != nil || st.Size() == 0 {
			rel, _ := filepath.Rel(root, path)
			empty = append(empty, rel)
		}
	}
	sort.Strings(empty)
	if len(empty) > 0 {
		t.Errorf("after a new boot the rebuild left %d of %d files empty:\n  %s", len(empty), len(before), strings.Join(empty, "\n  "))
	}
}

// TestAttackKill9RightAfterSpawnKeepsWhatTheAPISaid: a spawn records its
// pid and agent.started lazily (synchronous=NORMAL for a batch of lazy
// updates alone). A daemon killed with SIGKILL right after the API
// answered, with no durable commit after those lazy ones, must lose none
// of it: every pid the spawns returned and every event the API listed is
// there, at the same sequence number, for the next daemon, and the log's
// checkpoint covers them.
func TestAttackKill9RightAfterSpawnKeepsWhatTheAPISaid(t *testing.T) {
	home := kintest.TempHome(t)
	removeHomeCgroup(t, home)
	first := startDaemonProcess(t, home)
	c, err := client.New(client.Config{Socket: filepath.Join(home, daemon.SocketName)})
	if err != nil {
		t.Fatal(err)
	}
	var spawned []*kin.Agent
	spawn := func(n int) {
		for range n {
			spawned = append(spawned, spawnAgent(t, c, "lazy-"+strconv.Itoa(len(spawned)), 0, "sleep"))
		}
	}
	spawn(4)
	// A checkpoint (a durable commit) first, then spawns whose pids and
	// events are the last writes, lazy ones: read what the API says of
	// them, then kill the daemon at once.
	cp, err := c.LogCheckpoint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	spawn(4)
	said := events(t, c, kin.EventFilter{})
	first.Process.Signal(syscall.SIGKILL)
	first.Wait()
	c.Close()
	t.Cleanup(func() {
		for _, a := range spawned {
			syscall.Kill(a.PID, syscall.SIGKILL)
		}
	})

	d := kintest.StartDaemon(t, kintest.WithHome(home))
	defer d.Close()
	for _, a := range spawned {
		got, err := d.Client.Agent(ctx, a.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.PID != a.PID || !got.StartedAt.Equal(a.StartedAt) {
			t.Errorf("%s: pid %d started %v after the kill; the spawn said pid %d started %v", a.Name, got.PID, got.StartedAt, a.PID, a.StartedAt)
		}
	}
	after := events(t, d.Client, kin.EventFilter{Limit: len(said)})
	if len(after) < len(said) {
		t.Fatalf("%d events after the kill; the API listed %d before it", len(after), len(said))
	}
	for i, e := range said {
		if after[i].Seq != e.Seq || after[i].Type != e.Type || after[i].Agent != e.Agent || string(after[i].Data) != string(e.Data) {
			t.Errorf("event %d: %+v after the kill; before it: %+v", e.Seq, after[i], e)
		}
	}
	// The checkpoint signed before the kill is a prefix of the log after it.
	if _, err := d.Client.LogConsistency(ctx, cp.Size, 0); err != nil {
		t.Fatalf("consistency from the checkpoint read before the kill: %v", err)
	}
}

// TestAttackAgentReachesNothingOfKinsHomeThroughTheView: under a root
// daemon an agent's shim restricts itself with the daemon's ruleset
// holding the default view (sandbox.View). The agent, as its own uid,
// tries kin's home (the database, the boot file, the logs), the agent
// filesystem beyond its own home (the progress file, other agents'
// control files and sessions), the shim every agent starts through, and
// the descriptors it might have inherited (the ruleset, the View's): all
// refused or closed; what the view grants (the system, its own session)
// stays reachable.
func TestAttackAgentReachesNothingOfKinsHomeThroughTheView(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the View serves a root daemon's agents, which run as their own uids")
	}
	d := kintest.StartDaemon(t)
	victim := spawnAgent(t, d.Client, "view-victim", 0, "sleep")
	root := filepath.Join(d.Home, "ctx")
	vdir := sessionDir(t, d, victim)
	shim := filepath.Join(root, "bin", ".sandbox-shim")
	denied := []string{
		"read:" + filepath.Join(d.Home, daemon.TokenName),
		"read:" + filepath.Join(d.Home, "ctx-boot"),
		"list:" + d.Home,
		"list:" + filepath.Join(d.Home, "logs"),
		"read:" + filepath.Join(root, ".kin-synced"),
		"list:" + filepath.Join(root, "agent"),
		"read:" + filepath.Join(root, "agent", "view-victim.d", "meta.json"),
		"read:" + filepath.Join(vdir, "meta.json"),
		"read:" + filepath.Join(vdir, "agent.key"),
		"append:" + shim,
	}
	probes := []string{filepath.Join(d.Home, daemon.TokenName), filepath.Join(d.Home, "ctx-boot"), shim, filepath.Join(vdir, "agent.key")}
	if onSQLite(d) {
		denied = append(denied, "read:"+filepath.Join(d.Home, "kin.db"))
		probes = append(probes, filepath.Join(d.Home, "kin.db"))
	}
	for _, p := range probes {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("probe target: %v", err)
		}
	}
	var closed []string
	for fd := 3; fd < 64; fd++ {
		closed = append(closed, "fd:"+strconv.Itoa(fd))
	}
	out := outPath(t)
	allowed := []string{"read:/etc/hostname"}
	mode := "trespass " + strings.Join(append(append(append([]string{}, denied...), closed...), allowed...), " ")
	direct := d.Runner.Supervisor().DirectStarted()
	spawnAgent(t, d.Client, "view-attacker", 0, mode, withEnv("KINTEST_OUT="+out))
	got := waitOut(t, out, "trespass done")
	if d.Runner.Supervisor().DirectStarts() && d.Runner.Supervisor().DirectStarted() != direct+1 {
		t.Errorf("the attacker was started through the shim: %d direct starts before, %d after", direct, d.Runner.Supervisor().DirectStarted())
	}
	res := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(got), "\n") {
		if k, v, ok := strings.Cut(line, ": "); ok {
			res[strings.Replace(k, " ", ":", 1)] = v
		}
	}
	for _, p := range denied {
		if r := res[p]; !strings.HasSuffix(r, "permission denied") {
			t.Errorf("%s: %q; want permission denied", p, r)
		}
	}
	// The agent's Go runtime opens a few of its own (the cgroup's CPU
	// quota files, epoll, an eventfd); nothing else may be open.
	for _, p := range closed {
		r := res[p]
		link, open := strings.CutPrefix(r, "open: ")
		own := link == "anon_inode:[eventpoll]" || link == "anon_inode:[eventfd]" || strings.HasPrefix(link, "/sys/fs/cgroup/")
		if r == "" || open && !own {
			t.Errorf("%s: %q: inherited from kin", p, r)
		}
	}
	for _, p := range allowed {
		if r := res[p]; r != "ok" {
			t.Errorf("%s: %q; want ok", p, r)
		}
	}
}
