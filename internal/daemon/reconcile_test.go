package daemon_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kin-agents/kin/client"
	"github.com/kin-agents/kin/internal/daemon"
	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/internal/supervisor/cgroup"
	"github.com/kin-agents/kin/kin"
)

// holdStore wraps a daemon's store so that the first write of what
// ("adopted": an agent.adopted event; "stopping": an agent marked
// stopping) blocks the store's writer until release is closed; held is
// called once when it does. The writer holds the store's write
// transaction meanwhile, so no write commits, while reads go on: a daemon
// caught at that point of its reconciliation, deterministically.
func holdStore(what string, held func(), release <-chan struct{}) func(store.Store) store.Store {
	h := &holder{what: what, held: held, release: release}
	return func(s store.Store) store.Store { return holdingStore{s, h} }
}

type holder struct {
	what    string
	once    sync.Once
	held    func()
	release <-chan struct{}
}

func (h *holder) hold() {
	h.once.Do(h.held)
	<-h.release
}

type holdingStore struct {
	store.Store
	h *holder
}

func (s holdingStore) Update(ctx context.Context, fn func(store.Tx) error) error {
	return s.Store.Update(ctx, func(tx store.Tx) error { return fn(holdingTx{tx, s.h}) })
}

type holdingTx struct {
	store.Tx
	h *holder
}

func (tx holdingTx) EventAppend(ctx context.Context, e kin.Event) (kin.Event, error) {
	if tx.h.what == "adopted" && e.Type == kin.EventAgentAdopted {
		tx.h.hold()
	}
	return tx.Tx.EventAppend(ctx, e)
}

func (tx holdingTx) AgentUpdate(ctx context.Context, p store.AgentUpdateParams) error {
	if tx.h.what == "stopping" && p.State != nil && *p.State == kin.StateStopping {
		tx.h.hold()
	}
	return tx.Tx.AgentUpdate(ctx, p)
}

// AgentUpdateMany is how a cancellation marks its agents stopping.
func (tx holdingTx) AgentUpdateMany(ctx context.Context, ids []kin.AgentID, p store.AgentUpdateParams) error {
	if tx.h.what == "stopping" && p.State != nil && *p.State == kin.StateStopping {
		tx.h.hold()
	}
	return tx.Tx.AgentUpdateMany(ctx, ids, p)
}

// removeHomeCgroup kills and removes, when the test ends, what is left in
// the kin root cgroup of a home whose daemons a test kills with SIGKILL
// (registered first, it runs after every other cleanup).
func removeHomeCgroup(t *testing.T, home string) {
	t.Helper()
	m, err := cgroup.FindMount()
	if err != nil || !m.Writable {
		return
	}
	abs, _ := filepath.Abs(home)
	sum := sha256.Sum256([]byte(abs))
	dir := filepath.Join(m.Dir, "kin-"+hex.EncodeToString(sum[:6]))
	t.Cleanup(func() {
		if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
			return
		}
		t.Errorf("the kin root cgroup %s is left; killing and removing it", dir)
		cgroup.Kill(dir)
		c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cgroup.WaitEmpty(c, dir)
		cgroup.RemoveTree(dir)
	})
}

// TestRequestsAnsweredWhileReconciling: a daemon restarted on agents an
// earlier one left running serves at once; while it has not yet checked
// them (their re-adoption held in the store) they are shown as not yet
// checked, in each agent and in the status, and a stop of one waits for
// its check, then stops it as usual.
func TestRequestsAnsweredWhileReconciling(t *testing.T) {
	home := kintest.TempHome(t)
	removeHomeCgroup(t, home)
	d1 := kintest.StartDaemon(t, kintest.WithHome(home), kintest.WithLeaveRunning())
	a := spawnAgent(t, d1.Client, "a", 0, "sleep")
	b := spawnAgent(t, d1.Client, "b", a.ID, "sleep")
	if err := d1.Close(); err != nil {
		t.Fatal(err)
	}

	held, release := make(chan struct{}), make(chan struct{})
	d2 := kintest.StartDaemon(t, kintest.WithHome(home), func(c *daemon.Config) {
		c.WrapStore = holdStore("adopted", func() { close(held) }, release)
	})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free) // before the daemon's Close, which needs its writer
	select {
	case <-held:
	case <-time.After(20 * time.Second):
		t.Fatal("the restarted daemon never began re-adopting")
	}

	st, err := d2.Client.Status(ctx)
	if err != nil {
		t.Fatalf("status while reconciling: %v", err)
	}
	if st.Reconciling != 2 || st.Running > 2 {
		t.Fatalf("status while reconciling: %d reconciling, %d running; want 2 not yet checked", st.Reconciling, st.Running)
	}
	for _, x := range []*kin.Agent{a, b} {
		got, err := d2.Client.Agent(ctx, x.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !got.Reconciling || !got.Running() || got.PID != x.PID {
			t.Fatalf("%s while reconciling: reconciling %v, running %v, pid %d", x.Name, got.Reconciling, got.Running(), got.PID)
		}
	}
	list, err := d2.Client.Agents(ctx, kin.AgentFilter{})
	if err != nil || len(list) != 2 || !list[0].Reconciling || !list[1].Reconciling {
		t.Fatalf("agents while reconciling: %v, %v", list, err)
	}
	tree, err := d2.Client.Tree(ctx, a.ID)
	if err != nil || len(tree) != 1 || !tree[0].Reconciling {
		t.Fatalf("tree while reconciling: %v, %v", tree, err)
	}

	// A stop waits for b's check, then stops it.
	type stopResult struct {
		stopped []*kin.Agent
		err     error
	}
	stopped := make(chan stopResult, 1)
	go func() {
		s, err := d2.Client.Stop(ctx, kin.StopRequest{ID: b.ID})
		stopped <- stopResult{s, err}
	}()
	free()
	var r stopResult
	select {
	case r = <-stopped:
	case <-time.After(30 * time.Second):
		t.Fatal("the stop of an agent being checked did not return once it was checked")
	}
	if r.err != nil || len(r.stopped) != 1 || r.stopped[0].ID != b.ID || r.stopped[0].State != kin.StateCancelled {
		t.Fatalf("stop after the check: %v, %v", r.stopped, r.err)
	}
	kintest.WaitFor(t, 10*time.Second, "b's process to end", func() bool { return !alive(b.PID) })
	got := waitAgent(t, d2.Client, a.ID, "checked", func(x *kin.Agent) bool { return !x.Reconciling })
	if !got.Running() || !alive(a.PID) {
		t.Fatalf("a after its check: %+v (alive %v)", got, alive(a.PID))
	}
	kintest.WaitFor(t, 10*time.Second, "the status to show nothing left to check", func() bool {
		st, err := d2.Client.Status(ctx)
		return err == nil && st.Reconciling == 0 && st.Running == 1
	})
	if adopted := events(t, d2.Client, kin.EventFilter{Types: []string{kin.EventAgentAdopted}}); len(adopted) != 2 {
		t.Fatalf("adopted events = %d, want 2", len(adopted))
	}
}

// TestKill9MidReconcileConverges: the daemon is killed with SIGKILL while a
// tree runs, and one agent dies while it is down. A second daemon starts
// reconciling and is itself killed with SIGKILL in the middle: before it
// recorded any re-adoption, or after it recorded the dead agent lost but
// before it cancelled that agent's children. A third daemon still ends
// where a single restart would: the dead agent recorded lost, its owned
// children cancelled (parent death) and gone, the others re-adopted and
// alive, and nothing running unaccounted for.
func TestKill9MidReconcileConverges(t *testing.T) {
	for _, at := range []string{"adopted", "stopping"} {
		t.Run("killed-at-"+at, func(t *testing.T) { kill9MidReconcile(t, at) })
	}
}

func kill9MidReconcile(t *testing.T, at string) {
	home := kintest.TempHome(t)
	removeHomeCgroup(t, home)
	first := startDaemonProcess(t, home)
	c, err := client.New(client.Config{Socket: filepath.Join(home, daemon.SocketName)})
	if err != nil {
		t.Fatal(err)
	}
	root := spawnAgent(t, c, "root", 0, "sleep")
	mid := spawnAgent(t, c, "mid", root.ID, "sleep")
	leaves := []*kin.Agent{spawnAgent(t, c, "leaf1", mid.ID, "sleep"), spawnAgent(t, c, "leaf2", mid.ID, "sleep")}
	other := spawnAgent(t, c, "other", root.ID, "sleep")
	c.Close()
	first.Process.Signal(syscall.SIGKILL)
	first.Wait()
	syscall.Kill(mid.PID, syscall.SIGKILL) // dies while nobody supervises it
	kintest.WaitFor(t, 5*time.Second, "mid to die", func() bool { return !alive(mid.PID) })

	marker := filepath.Join(t.TempDir(), "held")
	second := startDaemonProcessEnv(t, home, "KIN_TEST_DAEMON_HOLD="+at+":"+marker)
	kintest.WaitFor(t, 20*time.Second, "the second daemon to reach "+at, func() bool {
		_, err := os.Stat(marker)
		return err == nil
	})
	second.Process.Signal(syscall.SIGKILL)
	second.Wait()

	d := kintest.StartDaemon(t, kintest.WithHome(home))
	m := waitAgent(t, d.Client, mid.ID, "recorded lost", func(a *kin.Agent) bool { return !a.Reconciling && !a.EndedAt.IsZero() })
	if m.State != kin.StateExited || m.EndReason != "lost" {
		t.Fatalf("mid = %s, %s", m.State, m.EndReason)
	}
	for _, l := range leaves {
		got := waitAgent(t, d.Client, l.ID, "cancelled", stateIs(kin.StateCancelled))
		if got.EndReason != "parent_dead" {
			t.Fatalf("%s ended %s, want parent_dead", l.Name, got.EndReason)
		}
		kintest.WaitFor(t, 10*time.Second, l.Name+"'s process to end", func() bool { return !alive(l.PID) })
	}
	for _, a := range []*kin.Agent{root, other} {
		got := waitAgent(t, d.Client, a.ID, "checked", func(x *kin.Agent) bool { return !x.Reconciling })
		if !got.Running() || got.PID != a.PID || !alive(a.PID) {
			t.Fatalf("%s was not re-adopted: %+v (alive %v)", a.Name, got, alive(a.PID))
		}
	}
	kintest.WaitFor(t, 10*time.Second, "two agents running and none left to check", func() bool {
		st, err := d.Client.Status(ctx)
		return err == nil && st.Running == 2 && st.Reconciling == 0
	})
	if lost := events(t, d.Client, kin.EventFilter{Types: []string{kin.EventAgentLost}}); len(lost) != 1 || lost[0].Agent != mid.ID {
		t.Fatalf("lost events = %v, want one for mid", lost)
	}
}

// TestRestartKeepsTheChildOfAParentWithoutProcess: a child spawned under a
// registered agent that has no process nests in a group made for that
// parent, which no running agent owns. A restart re-adopts the child and
// leaves that group alone, rather than killing it, and the child with it,
// as a stray.
func TestRestartKeepsTheChildOfAParentWithoutProcess(t *testing.T) {
	home := kintest.TempHome(t)
	removeHomeCgroup(t, home)
	d1 := kintest.StartDaemon(t, kintest.WithHome(home), kintest.WithLeaveRunning())
	parent := register(t, d1.Client, kin.RegisterRequest{Name: "planner", Responsible: "x"})
	child := spawnAgent(t, d1.Client, "worker", parent.ID, "sleep")
	if err := d1.Close(); err != nil {
		t.Fatal(err)
	}
	d2 := kintest.StartDaemon(t, kintest.WithHome(home))
	kintest.WaitFor(t, 10*time.Second, "the restart to check every agent", func() bool {
		st, err := d2.Client.Status(ctx)
		return err == nil && st.Reconciling == 0
	})
	// The stray groups are killed after the check: the child's end, if
	// it came, is recorded by then or soon after.
	if err := d2.Close(); err != nil {
		t.Fatal(err)
	}
	d3 := kintest.StartDaemon(t, kintest.WithHome(home))
	got, err := d3.Client.Agent(ctx, child.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.EndReason != "shutdown" {
		t.Fatalf("the child of a parent without a process ended %q (%s) after a restart; want it re-adopted, then stopped by the shutdown", got.EndReason, got.State)
	}
}
