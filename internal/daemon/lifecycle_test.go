package daemon_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kin-agents/kin/client"
	"github.com/kin-agents/kin/internal/daemon"
	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/kin"
)

func TestSuspendDoesNotCascadeUnlessAsked(t *testing.T) {
	d := kintest.StartDaemon(t)
	m := seedTree(t, d.Client)
	changed, err := d.Client.SetStatus(ctx, kin.StatusRequest{ID: m["collector"].ID, Action: kin.ActionSuspend})
	if err != nil || len(changed) != 1 || changed[0].Status != kin.StatusSuspended {
		t.Fatalf("suspend = %v, %v", changed, err)
	}
	// seed 000: children stay active when their parent is suspended ...
	scraper, _ := d.Client.Agent(ctx, m["scraper"].ID)
	if scraper.Status != kin.StatusActive {
		t.Fatalf("child of a suspended parent = %s", scraper.Status)
	}
	// ... but a suspended parent cannot spawn.
	_, err = d.Client.Register(ctx, kin.RegisterRequest{Name: "new", Parent: m["collector"].ID})
	wantCode(t, err, kin.ECodeParentNotActive)
	_, err = d.Client.SetStatus(ctx, kin.StatusRequest{ID: m["collector"].ID, Action: kin.ActionSuspend})
	wantCode(t, err, kin.ECodeInvalidTransition)

	// --cascade suspends the whole subtree, skipping who is already suspended.
	changed, err = d.Client.SetStatus(ctx, kin.StatusRequest{ID: m["coordinator"].ID, Action: kin.ActionSuspend, Cascade: true, Reason: "audit"})
	if err != nil || len(changed) != 6 {
		t.Fatalf("cascade suspend changed %d agents, %v; want 6 (7 minus the suspended one)", len(changed), err)
	}
	sub, _ := d.Client.Tree(ctx, m["coordinator"].ID)
	var walk func(n *kin.TreeNode)
	walk = func(n *kin.TreeNode) {
		if n.Status != kin.StatusSuspended {
			t.Errorf("%s is %s after cascade", n.Name, n.Status)
		}
		for _, c := range n.Children {
			walk(c)
		}
	}
	walk(sub[0])
	evs, _ := d.Client.Events(ctx, kin.EventFilter{Agent: m["latex"].ID, Types: []string{kin.EventAgentStatus}})
	var from kin.AgentID
	var reason string
	if len(evs) != 1 || evs[0].Field("cascade_from", &from) != nil || from != m["coordinator"].ID || evs[0].Field("reason", &reason) != nil || reason != "audit" {
		t.Fatalf("cascade event = %v", evs)
	}
	changed, err = d.Client.SetStatus(ctx, kin.StatusRequest{ID: m["coordinator"].ID, Action: kin.ActionResume, Cascade: true})
	if err != nil || len(changed) != 7 {
		t.Fatalf("cascade resume changed %d, %v", len(changed), err)
	}
}

func TestRevokeAndTerminate(t *testing.T) {
	d := kintest.StartDaemon(t)
	r := register(t, d.Client, kin.RegisterRequest{Name: "coder", Responsible: "x"})
	c := register(t, d.Client, kin.RegisterRequest{Name: "rev-123", Parent: r.ID})
	if _, err := d.Client.SetStatus(ctx, kin.StatusRequest{ID: c.ID, Action: kin.ActionRevoke}); err != nil {
		t.Fatal(err)
	}
	_, err := d.Client.SetStatus(ctx, kin.StatusRequest{ID: c.ID, Action: kin.ActionResume})
	wantCode(t, err, kin.ECodeInvalidTransition)
	_, err = d.Client.Register(ctx, kin.RegisterRequest{Name: "x", Parent: c.ID})
	wantCode(t, err, kin.ECodeParentNotActive)
	changed, err := d.Client.SetStatus(ctx, kin.StatusRequest{ID: c.ID, Action: kin.ActionTerminate})
	if err != nil || changed[0].Status != kin.StatusTerminated || changed[0].State != kin.StateTerminated {
		t.Fatalf("terminate = %v, %v", changed, err)
	}
	_, err = d.Client.SetStatus(ctx, kin.StatusRequest{ID: c.ID, Action: kin.ActionTerminate})
	wantCode(t, err, kin.ECodeInvalidTransition)
	// The name of a terminated agent may be used again; its history stays.
	again := register(t, d.Client, kin.RegisterRequest{Name: "rev-123", Parent: r.ID})
	if again.ID == c.ID {
		t.Fatal("id reused")
	}
	old, err := d.Client.Agent(ctx, c.ID)
	if err != nil || old.Status != kin.StatusTerminated {
		t.Fatalf("history = %v, %v", old, err)
	}
	_, err = d.Client.SetStatus(ctx, kin.StatusRequest{ID: 99, Action: kin.ActionRevoke})
	wantCode(t, err, kin.ECodeNotFound)
	_, err = d.Client.SetStatus(ctx, kin.StatusRequest{ID: r.ID, Action: "pause"})
	wantCode(t, err, kin.ECodeInvalid)
}

func TestCircuitBreakerOpensAndCloses(t *testing.T) {
	clock := kintest.NewClock()
	d := kintest.StartDaemon(t, kintest.WithProfile("aauth"), kintest.WithClock(clock.Now)) // more than 10 in 1m: 5m cool-down
	top := register(t, d.Client, kin.RegisterRequest{Name: "planner", Responsible: "alice"})
	sub := register(t, d.Client, kin.RegisterRequest{Name: "search1", Parent: top.ID})
	for i := range 11 {
		_, err := d.Client.Register(ctx, kin.RegisterRequest{Name: fmt.Sprintf("deep%d", i), Parent: sub.ID})
		wantCode(t, err, kin.ECodeSpawnDepth)
		clock.Advance(time.Second)
	}
	_, err := d.Client.Register(ctx, kin.RegisterRequest{Name: "deep-x", Parent: sub.ID})
	wantCode(t, err, kin.ECodeCircuitOpen)
	a, _ := d.Client.Agent(ctx, sub.ID)
	if a.SpawnBlockedUntil.IsZero() {
		t.Fatal("spawn_blocked_until not shown")
	}
	opened, _ := d.Client.Events(ctx, kin.EventFilter{Agent: sub.ID, Types: []string{kin.EventCircuitOpen}})
	if len(opened) != 1 {
		t.Fatalf("circuit_open events = %d", len(opened))
	}
	// Other parents are not throttled.
	register(t, d.Client, kin.RegisterRequest{Name: "search2", Parent: top.ID})
	// Refusals while open do not extend the cool-down.
	for range 20 {
		_, err := d.Client.Register(ctx, kin.RegisterRequest{Name: "deep-y", Parent: sub.ID})
		wantCode(t, err, kin.ECodeCircuitOpen)
	}
	clock.Advance(5 * time.Minute)
	_, err = d.Client.Register(ctx, kin.RegisterRequest{Name: "deep-z", Parent: sub.ID})
	wantCode(t, err, kin.ECodeSpawnDepth) // the breaker closed; the rule itself still holds
}

func TestGovernorSetIsAnEventAndPersists(t *testing.T) {
	home := kintest.TempHome(t)
	d := kintest.StartDaemon(t, kintest.WithHome(home))
	r := register(t, d.Client, kin.RegisterRequest{Name: "r", Responsible: "x"})
	c := register(t, d.Client, kin.RegisterRequest{Name: "c", Parent: r.ID})
	g, err := d.Client.SetGovernor(ctx, "max_generation_depth", "1")
	if err != nil || g.Profile.MaxGenerationDepth != 1 || g.Overrides["max_generation_depth"] != "1" {
		t.Fatalf("set = %+v, %v", g, err)
	}
	_, err = d.Client.Register(ctx, kin.RegisterRequest{Name: "gc", Parent: c.ID})
	wantCode(t, err, kin.ECodeSpawnDepth)
	evs, _ := d.Client.Events(ctx, kin.EventFilter{Types: []string{kin.EventGovernorChanged}})
	var from, to int
	if len(evs) != 1 || evs[0].Field("from", &from) != nil || evs[0].Field("to", &to) != nil || from != 10 || to != 1 {
		t.Fatalf("governor.changed = %v", evs)
	}
	for _, bad := range [][2]string{{"max_depth", "3"}, {"max_generation_depth", "three"}, {"max_children", "-1"}} {
		_, err := d.Client.SetGovernor(ctx, bad[0], bad[1])
		wantCode(t, err, kin.ECodeInvalid)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	d2 := kintest.StartDaemon(t, kintest.WithHome(home))
	g, _ = d2.Client.Governor(ctx)
	if g.Profile.MaxGenerationDepth != 1 || g.Source != "default" {
		t.Fatalf("after restart: %+v", g)
	}
	_, err = d2.Client.Register(ctx, kin.RegisterRequest{Name: "gc", Parent: c.ID})
	wantCode(t, err, kin.ECodeSpawnDepth)
}

func TestFollowEventsDeliversLiveEventsInOrder(t *testing.T) {
	d := kintest.StartDaemon(t)
	register(t, d.Client, kin.RegisterRequest{Name: "before", Responsible: "x"})
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	got := make(chan kin.Event, 100)
	done := make(chan error, 1)
	go func() {
		done <- d.Client.FollowEvents(fctx, kin.EventFilter{}, func(e kin.Event) error {
			got <- e
			return nil
		})
	}()
	first := <-got // the stored event comes first
	if first.Seq != 1 {
		t.Fatalf("first = %d", first.Seq)
	}
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			register(t, d.Client, kin.RegisterRequest{Name: fmt.Sprintf("live%d", i), Responsible: "x"})
		}()
	}
	wg.Wait()
	for want := int64(2); want <= 21; want++ {
		select {
		case e := <-got:
			if e.Seq != want {
				t.Fatalf("got seq %d, want %d", e.Seq, want)
			}
		case <-fctx.Done():
			t.Fatalf("timed out waiting for event %d", want)
		}
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("follow ended with %v", err)
	}
	// A limited follow returns by itself.
	n := 0
	err := d.Client.FollowEvents(ctx, kin.EventFilter{Since: 5, Limit: 3}, func(kin.Event) error { n++; return nil })
	if err != nil || n != 3 {
		t.Fatalf("limited follow: %d, %v", n, err)
	}
}

func TestSecondDaemonOnSameHomeIsRefused(t *testing.T) {
	d := kintest.StartDaemon(t)
	_, err := daemon.Start(ctx, d.Config)
	if err == nil || !strings.Contains(err.Error(), "already running") {
		t.Fatalf("second daemon: %v", err)
	}
	if _, err := d.Client.Status(ctx); err != nil {
		t.Fatalf("the first daemon was disturbed: %v", err)
	}
}

func TestHomeFilesArePrivate(t *testing.T) {
	d := kintest.StartDaemon(t)
	private := []string{daemon.SocketName, daemon.TokenName}
	if onSQLite(d) {
		private = append(private, "kin.db")
	}
	for _, name := range private {
		fi, err := os.Stat(d.Home + "/" + name)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", name, fi.Mode().Perm())
		}
	}
	st, err := d.Client.Status(ctx)
	if err != nil || st.Profile != "default" || st.Socket != d.SocketPath() || st.PID != os.Getpid() {
		t.Fatalf("status = %+v, %v", st, err)
	}
}

// TestAcknowledgedRegistrationsSurviveKill9 registers agents against a
// daemon in another process, kills it with SIGKILL mid-stream, and checks
// that every registration it acknowledged is in the store afterwards.
func TestAcknowledgedRegistrationsSurviveKill9(t *testing.T) {
	home := kintest.TempHome(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = daemonProcessEnv(t, home)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	c, err := client.New(client.Config{Socket: home + "/" + daemon.SocketName})
	if err != nil {
		t.Fatal(err)
	}
	kintest.WaitFor(t, 20*time.Second, "the daemon process to answer", func() bool {
		_, err := c.Status(ctx)
		return err == nil
	})
	var mu sync.Mutex
	acked := map[kin.AgentID]string{}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				name := fmt.Sprintf("w%d-%d", w, i)
				a, err := c.Register(ctx, kin.RegisterRequest{Name: name, Responsible: "x"})
				if err != nil {
					return // the daemon is gone
				}
				mu.Lock()
				acked[a.ID] = name
				mu.Unlock()
			}
		}()
	}
	kintest.WaitFor(t, 20*time.Second, "200 acknowledged registrations", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(acked) >= 200
	})
	cmd.Process.Signal(syscall.SIGKILL) // mid-stream
	cmd.Wait()
	close(stop)
	wg.Wait()
	c.Close()

	d := kintest.StartDaemon(t, kintest.WithHome(home))
	all, err := d.Client.Agents(ctx, kin.AgentFilter{})
	if err != nil {
		t.Fatal(err)
	}
	stored := map[kin.AgentID]string{}
	for _, a := range all {
		stored[a.ID] = a.Name
	}
	for id, name := range acked {
		if stored[id] != name {
			t.Fatalf("acknowledged agent %d (%s) was lost: stored %q", id, name, stored[id])
		}
	}
	evs, _ := d.Client.Events(ctx, kin.EventFilter{Types: []string{kin.EventAgentRegistered}})
	if len(evs) != len(all) {
		t.Fatalf("%d agents but %d registration events: an agent and its event must commit together", len(all), len(evs))
	}
	t.Logf("%d acknowledged, %d stored after kill -9", len(acked), len(all))
}
