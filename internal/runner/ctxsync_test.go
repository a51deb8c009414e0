package runner

import (
	"context"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/internal/store/sqlite"
	"github.com/kin-agents/kin/kin"
)

// TestJustRegistered: the tree's writer learns the name of an agent whose
// only events in a batch are its registration's, appended by this daemon,
// without reading its row; every other agent takes the whole path: one
// another handle on the store registered (another host of the fleet), one
// placed on another host (spawn.placed), one the writer has met, one
// touched, and the agent a full batch ends on, whose spawn.placed may be
// in the next batch (a review found that one: its name hid this host's
// earlier agent of the same name).
func TestJustRegistered(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "kin.db")
	here := openSQLite(t, path)
	other := openSQLite(t, path) // another host's handle on one store
	register := func(s store.Store, id kin.AgentID, name string, placed bool) {
		t.Helper()
		err := store.UpdateAfter(ctx, s, func(tx store.Tx, _ *store.AfterCommit) error {
			if err := store.AppendEvent(ctx, tx, t0(), kin.EventAgentRegistered, id, 1, kin.AgentRegisteredData{Agent: id, Name: name, Parent: 1}); err != nil {
				return err
			}
			if err := store.AppendEvent(ctx, tx, t0(), kin.EventChildSpawned, id, 1, kin.ChildSpawnedData{Parent: 1, Child: id}); err != nil {
				return err
			}
			if placed {
				return store.AppendEvent(ctx, tx, t0(), kin.EventSpawnPlaced, id, 1, kin.SpawnPlacedData{Agent: id, Parent: 1, Host: "beta"})
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	register(here, 2, "plain", false)
	register(other, 3, "elsewhere", false)
	register(here, 4, "placed", true)
	register(here, 5, "met", false)
	register(here, 6, "touched", false)

	run := &Runner{store: here, ctlSrc: &ctlSource{}, names: newNameIndex(), ctxAgents: map[kin.AgentID]*ctxAgent{5: {}}}
	w := &ctxWriter{d: run}
	batch := func(evs []kin.Event) ([]kin.AgentID, map[kin.AgentID][]kin.Event) {
		var ids []kin.AgentID
		by := map[kin.AgentID][]kin.Event{}
		for _, ev := range evs {
			if _, seen := by[ev.Agent]; !seen {
				ids = append(ids, ev.Agent)
			}
			by[ev.Agent] = append(by[ev.Agent], ev)
		}
		return ids, by
	}
	evs, err := here.EventList(ctx, kin.EventFilter{Limit: ctxBatch})
	if err != nil {
		t.Fatal(err)
	}
	ids, by := batch(evs)
	rest := w.justRegistered(ids, evs, by, map[kin.AgentID]bool{6: true})
	if want := []kin.AgentID{3, 4, 5, 6}; !slices.Equal(rest, want) {
		t.Errorf("read whole: %v, want %v", rest, want)
	}
	for name, want := range map[string]kin.AgentID{"plain": 2, "elsewhere": 0, "placed": 0, "met": 0, "touched": 0} {
		if id, _ := run.names.latest(name); id != want {
			t.Errorf("%s: the writer knows agent %d, want %d", name, id, want)
		}
	}

	// A full batch that ends after "cut"'s agent.child.spawned, before
	// its spawn.placed.
	filler := ctxBatch - 2 - len(evs)
	err = store.UpdateAfter(ctx, here, func(tx store.Tx, _ *store.AfterCommit) error {
		for range filler {
			if err := store.AppendEvent(ctx, tx, t0(), kin.EventAgentStatus, 9, 1, kin.AgentStatusData{Agent: 9, From: kin.StatusActive, To: kin.StatusSuspended}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	register(here, 7, "cut", true)
	register(here, 8, "next", false)
	evs, err = here.EventList(ctx, kin.EventFilter{Limit: ctxBatch})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != ctxBatch || evs[len(evs)-1].Agent != 7 || evs[len(evs)-1].Type != kin.EventChildSpawned {
		t.Fatalf("the batch: %d events, the last %s of agent %d", len(evs), evs[len(evs)-1].Type, evs[len(evs)-1].Agent)
	}
	run.names = newNameIndex()
	ids, by = batch(evs)
	rest = w.justRegistered(ids, evs, by, nil)
	if !slices.Contains(rest, 7) {
		t.Errorf("the agent the full batch ends on was not read whole: %v", rest)
	}
	if id, _ := run.names.latest("cut"); id != 0 {
		t.Errorf("the writer took agent %d's name from a batch that may end inside its commit", id)
	}
	if id, _ := run.names.latest("plain"); id != 2 {
		t.Errorf("plain: agent %d, want 2 (a full batch's other agents keep the shortcut)", id)
	}
}

func t0() time.Time { return time.Unix(1_700_000_000, 0).UTC() }

// openSQLite opens a store on the SQLite file path, closed at the test's end.
func openSQLite(t *testing.T, path string) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// TestRecordBesideNothingToRecord: a cancellation with no agent to record
// (a leaf's leftovers killed) makes no record beside the reaping: no
// transaction for nothing (stopAndRecord makes none for it either).
func TestRecordBesideNothingToRecord(t *testing.T) {
	run := &Runner{}
	if r := run.recordBeside(context.Background(), &cancellation{}, []kin.AgentID{7}); r != nil {
		t.Fatal("a record beside the reaping for a cancellation of no agent")
	}
}

// TestWriterSettlesUnlessWaitedFor: a commit wakes the tree's writer, which
// lets it settle (settleFor) before applying it; a caller waiting for the
// tree (waitApplied: kin wait) does not wait out the settling, and a stop
// ends it and still applies what was committed. settleFor is an hour here:
// without the hurry the wait below runs into its deadline, without the
// stop's case the stop does, and a settling that does not wait applies the
// commit within the 50 ms watched for it.
func TestWriterSettlesUnlessWaitedFor(t *testing.T) {
	ctx := context.Background()
	w, st, waiting := newTestWriter(t, time.Hour, yieldMax)
	settled := make(chan struct{}, 8)
	settling = func() { settled <- struct{}{} }
	go w.run()
	var stopOnce sync.Once
	stopped := make(chan struct{})
	stop := func() bool {
		stopOnce.Do(func() { go func() { w.stop(); close(stopped) }() })
		select {
		case <-stopped:
			return true
		case <-time.After(10 * time.Second):
			return false
		}
	}
	t.Cleanup(func() { stop() })
	// An event of no agent: the writer applies it without a file to
	// write. Each is committed once the writer waits for one.
	commit := func() int64 {
		t.Helper()
		within(t, waiting, "the writer did not come to wait for a commit")
		var seq int64
		commitNoAgentEvent(t, st, &seq)
		within(t, settled, "the commit did not wake the writer")
		return seq
	}

	seq := commit()
	notApplied(t, w, seq, "while it settled")
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := w.waitApplied(wctx, seq); err != nil {
		t.Fatalf("waiting for the tree: %v (the wait did not hurry the settling writer)", err)
	}

	// Settling again on the next commit, the writer stops when told, and
	// applies that commit as it stops.
	seq = commit()
	if !stop() {
		t.Fatal("the writer did not stop while it settled")
	}
	if got, _ := writerAt(w); got < seq {
		t.Errorf("the writer stopped at event %d, before the last commit's %d", got, seq)
	}
}

// commitNoAgentEvent commits an event of no agent (the tree's writer
// applies it without a file to write), setting *seq to its seq before the
// commit, for whoever the commit wakes.
func commitNoAgentEvent(t *testing.T, st store.Store, seq *int64) {
	t.Helper()
	ctx := context.Background()
	err := store.UpdateAfter(ctx, st, func(tx store.Tx, _ *store.AfterCommit) error {
		e, err := kin.NewEvent("aauth.test", 0, 0, map[string]string{})
		if err != nil {
			return err
		}
		e.Time = t0()
		e, err = tx.EventAppend(ctx, e)
		*seq = e.Seq
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// notApplied fails the test if the tree's writer has applied event seq,
// or applies anything within the next 50 ms; while says when that was wrong.
func notApplied(t *testing.T, w *ctxWriter, seq int64, while string) {
	t.Helper()
	got, advance := writerAt(w)
	if got >= seq {
		t.Fatalf("the writer applied event %d %s", seq, while)
	}
	select {
	case <-advance:
		got, _ = writerAt(w)
		t.Fatalf("the writer applied up to event %d %s", got, while)
	case <-time.After(50 * time.Millisecond):
	}
}

// writerAt is the last event the tree's writer applied, and the channel
// closed when it applies more.
func writerAt(w *ctxWriter) (int64, chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.applied, w.advance
}

// newTestWriter is a tree's writer over a fresh SQLite store, not started
// yet, with settleFor and yieldMax set for the test, and idle sending on
// waiting each time the writer comes to wait for a commit. The package's
// hooks (settling too, which the caller may set) are restored at the
// test's end.
func newTestWriter(t *testing.T, settle, maxYield time.Duration) (w *ctxWriter, st *sqlite.Store, waiting chan struct{}) {
	t.Helper()
	st = openSQLite(t, filepath.Join(t.TempDir(), "kin.db"))
	wasSettle, wasMax, wasIdle, wasSettling := settleFor, yieldMax, idle, settling
	t.Cleanup(func() { settleFor, yieldMax, idle, settling = wasSettle, wasMax, wasIdle, wasSettling })
	settleFor, yieldMax = settle, maxYield
	waiting = make(chan struct{}, 8)
	idle = func() { waiting <- struct{}{} }
	run := &Runner{store: st, log: slog.New(slog.DiscardHandler), names: newNameIndex(), ctxAgents: map[kin.AgentID]*ctxAgent{}}
	return blankCtxWriter(run), st, waiting
}
