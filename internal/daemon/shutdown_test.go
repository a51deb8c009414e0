package daemon_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kin-agents/kin/client"
	"github.com/kin-agents/kin/internal/daemon"
	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/internal/proctest"
	"github.com/kin-agents/kin/internal/supervisor/cgroup"
	"github.com/kin-agents/kin/kin"
)

// closeInBackground closes the daemon in the background and returns a channel
// that yields Close's error and how long it took.
func closeInBackground(d *kintest.Daemon) <-chan closed {
	ch := make(chan closed, 1)
	began := time.Now()
	go func() {
		err := d.Close()
		ch <- closed{err, time.Since(began)}
	}()
	return ch
}

type closed struct {
	err  error
	took time.Duration
}

// waitClosed waits for the shutdown; one that does not end within the
// given time fails the test, after its agents are killed so that it ends
// and leaves nothing behind.
func waitClosed(t *testing.T, ch <-chan closed, within time.Duration, agents ...*kin.Agent) closed {
	t.Helper()
	select {
	case c := <-ch:
		if c.err != nil {
			t.Fatalf("close: %v", c.err)
		}
		return c
	case <-time.After(within):
		for _, a := range agents {
			syscall.Kill(a.PID, syscall.SIGKILL)
		}
		select {
		case <-ch:
		case <-time.After(30 * time.Second):
		}
		t.Fatalf("the daemon's shutdown did not end within %s", within)
	}
	return closed{}
}

// noted reports whether each agent has written "term NAME" (note-term).
func noted(path string, names ...string) bool {
	b, _ := os.ReadFile(path)
	for _, n := range names {
		if !strings.Contains(string(b), "term "+n+"\n") {
			return false
		}
	}
	return true
}

// TestShutdownStopsIndependentSubtreesAtOnce: two roots, each ignoring
// SIGTERM with a grace of G and with a child. At shutdown both get SIGTERM
// while both still run (their cancellations overlap instead of running one
// after the other, which would kill the first before the second heard of
// it), both are killed when their grace ends, and the shutdown is over
// before 2G. Every agent is recorded cancelled for the shutdown.
func TestShutdownStopsIndependentSubtreesAtOnce(t *testing.T) {
	const grace = 3 * time.Second
	home := kintest.TempHome(t)
	d := kintest.StartDaemon(t, kintest.WithHome(home))
	out := outPath(t)
	var roots, kids []*kin.Agent
	for i := range 2 {
		r := spawnAgent(t, d.Client, fmt.Sprintf("deaf%d", i), 0, "note-term", withGrace(grace), withEnv("KINTEST_OUT="+out))
		roots = append(roots, r)
		kids = append(kids, spawnAgent(t, d.Client, fmt.Sprintf("kid%d", i), r.ID, "sleep", withGrace(grace)))
		waitOut(t, out, "ready "+r.Name)
	}
	done := closeInBackground(d)
	kintest.WaitFor(t, 2*grace, "both roots to get SIGTERM", func() bool { return noted(out, "deaf0", "deaf1") })
	for _, r := range roots {
		if !alive(r.PID) {
			t.Fatalf("%s was killed before the other root got SIGTERM: the roots were stopped one after the other", r.Name)
		}
	}
	c := waitClosed(t, done, 30*time.Second, append(roots, kids...)...)
	if c.took >= 2*grace {
		t.Fatalf("the shutdown took %s: not under 2 × the grace (%s), as stopping the roots one after the other would", c.took, grace)
	}
	for _, a := range append(roots, kids...) {
		if alive(a.PID) {
			t.Fatalf("%s (pid %d) outlived the shutdown", a.Name, a.PID)
		}
	}

	d2 := kintest.StartDaemon(t, kintest.WithHome(home))
	for _, a := range roots {
		got, _ := d2.Client.Agent(ctx, a.ID)
		if got.State != kin.StateCancelled || got.EndReason != "shutdown" || got.Exit == nil || got.Exit.Signal != "killed" {
			t.Fatalf("%s after the shutdown: %s, %s, exit %v; want cancelled for the shutdown, killed", a.Name, got.State, got.EndReason, got.Exit)
		}
	}
	for _, a := range kids {
		got, _ := d2.Client.Agent(ctx, a.ID)
		if got.State != kin.StateCancelled || got.EndReason != "shutdown" || got.EndedAt.IsZero() {
			t.Fatalf("%s after the shutdown: %s, %s", a.Name, got.State, got.EndReason)
		}
	}
}

// TestShutdownTimeoutKillsWhatIsLeft: agents ignoring SIGTERM with an
// hour's grace, and a shutdown timeout of one second. The shutdown sends
// every one SIGTERM, then at the timeout kills them all at once and records
// each (cancelled for the shutdown, killed): it does not wait for the grace.
func TestShutdownTimeoutKillsWhatIsLeft(t *testing.T) {
	home := kintest.TempHome(t)
	d := kintest.StartDaemon(t, kintest.WithHome(home), kintest.WithShutdownTimeout(time.Second))
	out := outPath(t)
	var all []*kin.Agent
	var names []string
	for i := range 2 {
		r := spawnAgent(t, d.Client, fmt.Sprintf("root%d", i), 0, "note-term", withGrace(kin.MaxGrace), withEnv("KINTEST_OUT="+out))
		k := spawnAgent(t, d.Client, fmt.Sprintf("child%d", i), r.ID, "note-term", withGrace(kin.MaxGrace), withEnv("KINTEST_OUT="+out))
		all = append(all, r, k)
		names = append(names, r.Name, k.Name)
	}
	for _, n := range names {
		waitOut(t, out, "ready "+n)
	}
	done := closeInBackground(d)
	kintest.WaitFor(t, 10*time.Second, "every agent to get SIGTERM", func() bool { return noted(out, names...) })
	waitClosed(t, done, 30*time.Second, all...) // not the hour of grace
	for _, a := range all {
		if alive(a.PID) {
			t.Fatalf("%s (pid %d) outlived the shutdown timeout", a.Name, a.PID)
		}
	}

	d2 := kintest.StartDaemon(t, kintest.WithHome(home))
	for _, a := range all {
		got, _ := d2.Client.Agent(ctx, a.ID)
		if got.State != kin.StateCancelled || got.EndReason != "shutdown" || got.EndedAt.IsZero() || got.Exit == nil || got.Exit.Signal != "killed" {
			t.Fatalf("%s after the shutdown timeout: %s, %s, exit %v; want cancelled for the shutdown, killed", a.Name, got.State, got.EndReason, got.Exit)
		}
		stops := 0
		for _, e := range events(t, d2.Client, kin.EventFilter{Agent: a.ID, Types: []string{kin.EventAgentStop}}) {
			if e.Agent == a.ID { // the filter also gives its children's
				stops++
			}
		}
		if stops != 1 {
			t.Fatalf("%s: %d agent.stop events, want 1", a.Name, stops)
		}
	}
}

// TestShutdownRecordsTheGoneWhileTheGraceRuns: a root that ignores SIGTERM,
// with a grace of G, and two children: one that dies of the SIGTERM, and
// one whose process dies of it but leaves in its group a process that
// ignores it. While the root's grace runs, the first is recorded (cancelled
// for the shutdown, terminated) and its group removed; the second is not,
// nor its group touched, since a process of its group lives, until the
// root's grace is over and the root's group is killed. Then everything is
// recorded as before.
func TestShutdownRecordsTheGoneWhileTheGraceRuns(t *testing.T) {
	const grace = 8 * time.Second
	home := kintest.TempHome(t)
	d := kintest.StartDaemon(t, kintest.WithHome(home))
	kinRoot := d.Runner.Supervisor().Root()
	if kinRoot == "" {
		t.Skip("needs cgroup v2: without it no group is known empty before its stop ends")
	}
	out := outPath(t)
	root := spawnAgent(t, d.Client, "deaf", 0, "note-term", withGrace(grace), withEnv("KINTEST_OUT="+out))
	waitOut(t, out, "ready deaf")
	gone := spawnAgent(t, d.Client, "gone", root.ID, "sleep", withGrace(grace))
	// Its process (sleep) dies of the SIGTERM; what it started in the
	// background ignores it.
	left, err := d.Client.Spawn(ctx, kin.SpawnRequest{
		RegisterRequest: kin.RegisterRequest{Name: "left", Parent: root.ID},
		Command:         []string{"/bin/sh", "-c", "(trap '' TERM; exec /bin/sleep 3600) >/dev/null 2>&1 & exec /bin/sleep 3600"},
		Grace:           func() *kin.Duration { g := kin.Duration(grace); return &g }(),
	})
	if err != nil {
		t.Fatal(err)
	}
	groupOf := func(a *kin.Agent) string {
		return filepath.Join(kinRoot, "a"+root.ID.String(), "a"+a.ID.String())
	}
	// Both of left's processes, once one of them ignores SIGTERM: a group
	// of two whose background shell has not run its trap yet dies whole
	// of the shutdown's SIGTERM (seen on a machine slow to fork: CI).
	kintest.WaitFor(t, 10*time.Second, "left's two processes, one ignoring SIGTERM", func() bool {
		b, _ := os.ReadFile(filepath.Join(groupOf(left), "self", "cgroup.procs"))
		pids := strings.Fields(string(b))
		if len(pids) != 2 {
			return false
		}
		for _, pid := range pids {
			n, _ := strconv.Atoi(pid)
			if ignored, _ := proctest.SignalIgnored(n, syscall.SIGTERM); ignored {
				return true
			}
		}
		return false
	})
	began := time.Now()
	done := closeInBackground(d)
	kintest.WaitFor(t, grace/2, "gone recorded while the root's grace runs", func() bool {
		a, err := d.Daemon.Agent(ctx, gone.ID)
		return err == nil && !a.EndedAt.IsZero()
	})
	a, err := d.Daemon.Agent(ctx, gone.ID)
	if err != nil {
		t.Fatal(err)
	}
	if a.State != kin.StateCancelled || a.EndReason != "shutdown" || a.Exit == nil || a.Exit.Signal != "terminated" {
		t.Errorf("gone while the grace runs: %s, %s, exit %v; want cancelled for the shutdown, terminated", a.State, a.EndReason, a.Exit)
	}
	kintest.WaitFor(t, grace/2, "gone's group removed while the root's grace runs", func() bool {
		_, err := os.Stat(groupOf(gone))
		return errors.Is(err, os.ErrNotExist)
	})
	if l, err := d.Daemon.Agent(ctx, left.ID); err != nil || !l.EndedAt.IsZero() || l.State != kin.StateStopping {
		t.Errorf("left while a process of its group lives: %+v, %v; want stopping, not ended", l, err)
	}
	if _, err := os.Stat(groupOf(left)); err != nil {
		t.Errorf("left's group while a process of it lives: %v", err)
	}
	if !alive(root.PID) || time.Since(began) >= grace {
		t.Fatalf("the root's grace was over (%s since the shutdown began) before the checks ended", time.Since(began))
	}
	waitClosed(t, done, 30*time.Second, root, gone, left)

	d2 := kintest.StartDaemon(t, kintest.WithHome(home))
	// The root killed; left's and gone's own processes died of the SIGTERM.
	for _, w := range []struct {
		a      *kin.Agent
		signal string
	}{{root, "killed"}, {left, "terminated"}, {gone, "terminated"}} {
		got, _ := d2.Client.Agent(ctx, w.a.ID)
		if got.State != kin.StateCancelled || got.EndReason != "shutdown" || got.EndedAt.IsZero() || got.Exit == nil || got.Exit.Signal != w.signal {
			t.Errorf("%s after the shutdown: %s, %s, exit %v; want cancelled for the shutdown, %s", w.a.Name, got.State, got.EndReason, got.Exit, w.signal)
		}
	}
	if stops := stopsOf(t, d2.Client, gone.ID); stops != 1 {
		t.Errorf("gone: %d agent.stop events, want 1", stops)
	}
}

// TestKill9MidShutdownAfterTheGoneAreRecorded: the daemon is killed with
// SIGKILL while its shutdown waits on a root that ignores SIGTERM, once the
// root's child, dead of the SIGTERM, is recorded and its group removed
// (while the grace runs). The next start finds the child recorded once
// (cancelled for the shutdown, terminated), takes the root, which still
// runs, back and finishes its stop; nothing is left.
func TestKill9MidShutdownAfterTheGoneAreRecorded(t *testing.T) {
	const grace = 8 * time.Second
	home := kintest.TempHome(t)
	removeHomeCgroup(t, home)
	m, err := cgroup.FindMount()
	if err != nil || !m.Writable {
		t.Skip("needs a writable cgroup v2: without it no group is known empty before its stop ends")
	}
	proc := startDaemonProcess(t, home)
	c, err := client.New(client.Config{Socket: filepath.Join(home, daemon.SocketName)})
	if err != nil {
		t.Fatal(err)
	}
	out := outPath(t)
	root := spawnAgent(t, c, "deaf", 0, "note-term", withGrace(grace), withEnv("KINTEST_OUT="+out))
	waitOut(t, out, "ready deaf")
	gone := spawnAgent(t, c, "gone", root.ID, "sleep", withGrace(grace))
	c.Close()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", gone.PID))
	if err != nil {
		t.Fatal(err)
	}
	_, leaf, _ := strings.Cut(strings.TrimSpace(string(b)), "0::")
	group := filepath.Dir(filepath.Join(m.Dir, leaf)) // .../a<root>/a<gone>, its self leaf's parent
	if filepath.Base(group) != "a"+gone.ID.String() {
		t.Fatalf("gone's group from its leaf %q: %s", leaf, group)
	}
	began := time.Now()
	proc.Process.Signal(syscall.SIGTERM)
	kintest.WaitFor(t, grace/2, "gone's group removed while the root's grace runs", func() bool {
		_, err := os.Stat(group)
		return errors.Is(err, os.ErrNotExist)
	})
	proc.Process.Signal(syscall.SIGKILL)
	proc.Wait()
	if !alive(root.PID) || time.Since(began) >= grace {
		t.Fatalf("the root's grace was over (%s) before the daemon was killed", time.Since(began))
	}

	d := kintest.StartDaemon(t, kintest.WithHome(home))
	g := waitAgent(t, d.Client, gone.ID, "checked", func(a *kin.Agent) bool { return !a.Reconciling })
	if g.State != kin.StateCancelled || g.EndReason != "shutdown" || g.Exit == nil || g.Exit.Signal != "terminated" {
		t.Errorf("gone after the restart: %s, %s, exit %v; want cancelled for the shutdown, terminated", g.State, g.EndReason, g.Exit)
	}
	// The root, still running and stopping, is taken back, and the stop
	// the killed daemon had begun is finished (reason "stopped"), or the
	// second shutdown's.
	waitAgent(t, d.Client, root.ID, "checked", func(a *kin.Agent) bool { return !a.Reconciling })
	waitClosed(t, closeInBackground(d), 30*time.Second, root)
	if alive(root.PID) {
		t.Fatalf("the root (pid %d) outlived the second shutdown", root.PID)
	}

	d2 := kintest.StartDaemon(t, kintest.WithHome(home))
	if got, _ := d2.Client.Agent(ctx, root.ID); got.State != kin.StateCancelled || got.EndedAt.IsZero() || (got.EndReason != "stopped" && got.EndReason != "shutdown") {
		t.Errorf("the root after the second shutdown: %s, %s, exit %v; want cancelled, stopped or for the shutdown", got.State, got.EndReason, got.Exit)
	}
	if stops := stopsOf(t, d2.Client, gone.ID); stops != 1 {
		t.Errorf("gone: %d agent.stop events, want 1", stops)
	}
}

// stopsOf counts agent id's agent.stop events: a record made twice (by the
// shutdown's batch and by its subtree's stop) would show two.
func stopsOf(t *testing.T, c kin.Service, id kin.AgentID) int {
	t.Helper()
	n := 0
	for _, e := range events(t, c, kin.EventFilter{Agent: id, Types: []string{kin.EventAgentStop}}) {
		if e.Agent == id {
			n++
		}
	}
	return n
}
