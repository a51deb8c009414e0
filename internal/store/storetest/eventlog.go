package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/kin-agents/kin/internal/auditlog"
	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/kin"
)

// The verifiable event log, as every driver keeps it: EventAppend numbers
// events 1, 2, 3, ... with no gap (a failed Update takes no number) and
// stores each leaf's tree hashes with it, so that auditlog recomputes,
// proves and verifies the log from the store alone.

// ErrBoom is what the suite's failing Updates return after writing.
var ErrBoom = errors.New("boom: this update fails after appending")

// logTime is the time of the test events' first event.
var logTime = time.Date(2026, 11, 21, 15, 2, 39, 123456789, time.UTC)

// logWords are the strings the test events' data is made of.
var logWords = []string{"active", "suspended", "terminated", "operator", "budget", "reviewed", "quota", "restart", "Ünïcode", "quote\"d", "tab\there", "line\nbreak", "<html>"}

// LogEvent is the i-th test event (i from 0): its type, agents and data
// depend only on i, and no two events have the same data.
func LogEvent(t testing.TB, i int) kin.Event {
	t.Helper()
	e, err := NewLogEvent(i)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// NewLogEvent is LogEvent outside a test (a helper process's).
func NewLogEvent(i int) (kin.Event, error) {
	rng := rand.New(rand.NewPCG(7, uint64(i)))
	types := []string{kin.EventAgentRegistered, kin.EventChildSpawned, kin.EventAgentStatus, kin.EventAgentUsage, kin.EventAgentMessage, kin.EventToolDenied}
	typ := types[rng.IntN(len(types))]
	agent := kin.AgentID(1 + rng.IntN(200))
	parent := kin.AgentID(rng.IntN(int(agent)))
	word := func() string { return logWords[rng.IntN(len(logWords))] }
	data := map[string]any{"n": i, "agent": agent, "reason": word() + " " + word()}
	switch typ {
	case kin.EventAgentStatus:
		data["from"], data["to"], data["by"] = word(), word(), "operator@host"
	case kin.EventAgentUsage:
		data["tokens"], data["cost"] = rng.IntN(100000), float64(rng.IntN(10000))/100
	case kin.EventAgentMessage:
		data["text"] = strings.Repeat(word()+" ", 1+rng.IntN(20))
		data["meta"] = map[string]any{"session": fmt.Sprintf("s%d", rng.IntN(9)), "tags": []string{word(), word()}}
	default:
		data["parent"], data["generation"] = parent, rng.IntN(5)
	}
	e, err := kin.NewEvent(typ, agent, parent, data)
	if err != nil {
		return kin.Event{}, err
	}
	e.Time = logTime.Add(time.Duration(i)*time.Millisecond + time.Duration(rng.IntN(1000)))
	if i%17 == 0 {
		e.Time = logTime.Add(time.Duration(i) * time.Second) // a whole second: no fraction digits
	}
	return e, nil
}

// AppendEvents appends LogEvent from..to-1 in one Update, which then
// returns fail; it returns the events as appended.
func AppendEvents(t testing.TB, s store.Store, from, to int, fail error) ([]kin.Event, error) {
	t.Helper()
	ctx := context.Background()
	var got []kin.Event
	err := s.Update(ctx, func(tx store.Tx) error {
		got = got[:0]
		for i := from; i < to; i++ {
			e, err := tx.EventAppend(ctx, LogEvent(t, i))
			if err != nil {
				return err
			}
			got = append(got, e)
		}
		return fail
	})
	return got, err
}

// LogKey is a fresh log key and its verifier.
func LogKey(t testing.TB) (*auditlog.Key, note.Verifier) {
	t.Helper()
	key, err := auditlog.LoadKey(filepath.Join(t.TempDir(), "key")) // LoadKey wants a 0700 directory
	if err != nil {
		t.Fatal(err)
	}
	v, err := auditlog.NewVerifier(key.VerifierKey())
	if err != nil {
		t.Fatal(err)
	}
	return key, v
}

// LogHead is s.LogHead, failing the test on an error.
func LogHead(t testing.TB, s store.Store) (int64, tlog.Hash) {
	t.Helper()
	size, root, err := s.LogHead(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return size, root
}

// Checkpoint signs the store's current head and keeps it; it returns what
// was kept.
func Checkpoint(t testing.TB, s store.Store, key *auditlog.Key) auditlog.StoredCheckpoint {
	t.Helper()
	ctx := context.Background()
	size, root := LogHead(t, s)
	msg, err := key.Sign(auditlog.Checkpoint{Origin: key.Name(), Size: size, Root: root})
	if err != nil {
		t.Fatal(err)
	}
	cp := auditlog.StoredCheckpoint{Size: size, Time: logTime.Add(time.Duration(size) * time.Second), Note: msg}
	if err := s.Update(ctx, func(tx store.Tx) error { return tx.LogCheckpointInsert(ctx, cp) }); err != nil {
		t.Fatal(err)
	}
	return cp
}

// FrontierOf is the tree of events, which must be seqs 1, 2, 3, ...
func FrontierOf(t testing.TB, events []kin.Event) auditlog.Frontier {
	t.Helper()
	var f auditlog.Frontier
	for i, e := range events {
		if e.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d: the log has a gap or a repeat", i, e.Seq)
		}
		f.Append(auditlog.LeafHash(e))
	}
	return f
}

// CheckHead checks that s's LogHead is the tree of events, and LogSize its
// size.
func CheckHead(t testing.TB, s store.Store, events []kin.Event) {
	t.Helper()
	f := FrontierOf(t, events)
	size, root := LogHead(t, s)
	if size != f.Size() || root != f.Root() {
		t.Fatalf("LogHead = %d %s, recomputed from the events %d %s", size, root, f.Size(), f.Root())
	}
	if n, err := s.LogSize(context.Background()); err != nil || n != f.Size() {
		t.Fatalf("LogSize = %d, %v; want %d", n, err, f.Size())
	}
}

// Verify runs auditlog.Verify over src.
func Verify(t testing.TB, src auditlog.Source, v note.Verifier, kept []byte) kin.LogReport {
	t.Helper()
	rep, err := auditlog.Verify(context.Background(), src, auditlog.VerifyOptions{Verifier: v, Kept: kept})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// WantOK fails unless rep says the log holds, with that many events and
// checkpoints.
func WantOK(t testing.TB, rep kin.LogReport, events int64, checkpoints int) {
	t.Helper()
	if !rep.OK || rep.Events != events || rep.Checkpoints != checkpoints {
		bad := "none"
		if rep.BadIndex != nil {
			bad = fmt.Sprint(*rep.BadIndex)
		}
		t.Fatalf("Verify: ok=%v events=%d checkpoints=%d bad index %s (%s); want ok with %d events, %d checkpoints",
			rep.OK, rep.Events, rep.Checkpoints, bad, rep.Problem, events, checkpoints)
	}
}

// SortBySeq sorts events by seq.
func SortBySeq(events []kin.Event) {
	sort.Slice(events, func(i, j int) bool { return events[i].Seq < events[j].Seq })
}

// storedEvents reads every event through LogEntries, failing on a damaged
// one.
func storedEvents(t testing.TB, s store.Reader) []kin.Event {
	t.Helper()
	var out []kin.Event
	err := s.LogEntries(context.Background(), func(en auditlog.Entry) error {
		if en.Damaged != "" {
			t.Errorf("seq %d: damaged: %s", en.Event.Seq, en.Damaged)
		}
		out = append(out, en.Event)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// sameEvents fails unless the stored events are the committed ones.
func sameEvents(t testing.TB, stored, committed []kin.Event) {
	t.Helper()
	if len(stored) != len(committed) {
		t.Fatalf("%d events stored, %d committed", len(stored), len(committed))
	}
	for i, e := range stored {
		c := committed[i]
		if e.Seq != c.Seq || !e.Time.Equal(c.Time) || e.Type != c.Type || e.Agent != c.Agent || e.Parent != c.Parent || !bytes.Equal(e.Data, c.Data) {
			t.Fatalf("stored event %d is %+v, committed %+v", i, e, c)
		}
	}
}

// testLogAppend appends from one Update at a time and from many at once,
// with failing and panicking Updates among them: the committed events are
// gapless, the head follows them, and the log verifies, with a checkpoint
// and a kept one proved consistent with a later one.
func testLogAppend(t *testing.T, s store.Store) {
	ctx := context.Background()
	key, v := LogKey(t)
	CheckHead(t, s, nil) // the empty log
	WantOK(t, Verify(t, s, v, nil), 0, 0)
	var (
		mu        sync.Mutex
		committed []kin.Event
		next      atomic.Int64 // the next LogEvent index: failed Updates use theirs up
	)
	update := func(n int, fail error, panics bool) error {
		from := int(next.Add(int64(n))) - n
		var got []kin.Event
		err := s.Update(ctx, func(tx store.Tx) error {
			got = got[:0]
			for i := from; i < from+n; i++ {
				e, err := tx.EventAppend(ctx, LogEvent(t, i))
				if err != nil {
					return err
				}
				got = append(got, e)
			}
			if panics {
				panic("this update panics after appending")
			}
			return fail
		})
		if err == nil {
			mu.Lock()
			committed = append(committed, got...)
			mu.Unlock()
		}
		return err
	}

	// One Update at a time: a failed one leaves no gap.
	for u := range 30 {
		n := 1 + u%6
		before, _ := LogHead(t, s)
		switch u % 5 {
		case 3:
			if err := update(n, nil, true); err == nil {
				t.Fatalf("update %d panicked but returned no error", u)
			}
		case 4:
			if err := update(n, ErrBoom, false); !errors.Is(err, ErrBoom) {
				t.Fatalf("update %d: %v, want %v", u, err, ErrBoom)
			}
		default:
			if err := update(n, nil, false); err != nil {
				t.Fatal(err)
			}
			if first := committed[len(committed)-n].Seq; first != before+1 {
				t.Fatalf("update %d: first event has seq %d after a tree of %d", u, first, before)
			}
		}
		CheckHead(t, s, committed)
	}

	// Free-running writers, some failing.
	var wg sync.WaitGroup
	var failed atomic.Int64
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(11, uint64(w)))
			for range 12 {
				fail := error(nil)
				if rng.IntN(4) == 0 {
					fail = ErrBoom
				}
				err := update(1+rng.IntN(8), fail, false)
				if !errors.Is(err, fail) {
					t.Errorf("writer %d: %v, want %v", w, err, fail)
				}
				if err != nil {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	if failed.Load() == 0 {
		t.Fatal("no free-running update failed: the test does not test what it says")
	}
	SortBySeq(committed)
	n := int64(len(committed))
	CheckHead(t, s, committed)
	sameEvents(t, storedEvents(t, s), committed)
	WantOK(t, Verify(t, s, v, nil), n, 0)

	// A signed checkpoint of the head is checked; a kept one is proved
	// consistent with a later one, through the stored hashes.
	kept := Checkpoint(t, s, key)
	WantOK(t, Verify(t, s, v, nil), n, 1)
	more, err := AppendEvents(t, s, int(next.Add(9))-9, int(next.Load()), nil)
	if err != nil {
		t.Fatal(err)
	}
	committed = append(committed, more...)
	CheckHead(t, s, committed)
	Checkpoint(t, s, key)
	rep := Verify(t, s, v, kept.Note)
	WantOK(t, rep, n+9, 3) // the two stored checkpoints and the kept one
	if rep.Consistency == "" {
		t.Error("no consistency proof from the kept checkpoint")
	}
}

// testLogProofs proves events included in checkpoints of several sizes,
// and each checkpoint consistent with every later one, from the stored
// hashes alone; and checks the checkpoints and registrations kept.
func testLogProofs(t *testing.T, s store.Store) {
	ctx := context.Background()
	key, v := LogKey(t)
	if _, err := s.LogCheckpointLatest(ctx); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("LogCheckpointLatest of a store without checkpoints: %v, want ErrNotFound", err)
	}
	var all []kin.Event
	var cps []auditlog.StoredCheckpoint
	for _, size := range []int{1, 2, 7, 16, 17, 31, 32, 33, 64, 100} {
		got, err := AppendEvents(t, s, len(all), size, nil)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, got...)
		cps = append(cps, Checkpoint(t, s, key))
	}
	// A checkpoint of a size already kept is not replaced.
	again := cps[len(cps)-1]
	again.Time = again.Time.Add(time.Hour)
	if err := s.Update(ctx, func(tx store.Tx) error { return tx.LogCheckpointInsert(ctx, again) }); err != nil {
		t.Fatal(err)
	}
	kept, err := s.LogCheckpoints(ctx)
	if err != nil || len(kept) != len(cps) {
		t.Fatalf("LogCheckpoints = %d, %v; want %d", len(kept), err, len(cps))
	}
	for i, c := range kept {
		if c.Size != cps[i].Size || !c.Time.Equal(cps[i].Time) || !bytes.Equal(c.Note, cps[i].Note) {
			t.Fatalf("checkpoint %d is %d %s, kept %d %s", i, c.Size, c.Time, cps[i].Size, cps[i].Time)
		}
	}
	if latest, err := s.LogCheckpointLatest(ctx); err != nil || latest.Size != 100 || !bytes.Equal(latest.Note, cps[len(cps)-1].Note) {
		t.Fatalf("LogCheckpointLatest = %d, %v; want the checkpoint of size 100", latest.Size, err)
	}
	stored := storedEvents(t, s)
	sameEvents(t, stored, all)
	roots := make([]tlog.Hash, len(cps))
	for i, cp := range cps {
		c, err := auditlog.OpenCheckpoint(cp.Note, v)
		if err != nil {
			t.Fatal(err)
		}
		roots[i] = c.Root
		for _, seq := range []int64{1, c.Size / 2, c.Size - 1, c.Size} {
			if seq < 1 {
				continue
			}
			e := stored[seq-1]
			p, err := auditlog.Prove(ctx, s, e, cp)
			if err != nil {
				t.Fatalf("inclusion of seq %d in the checkpoint of %d: %v", seq, c.Size, err)
			}
			got, _, err := auditlog.VerifyProof(p, v)
			if err != nil || got.Seq != seq || !bytes.Equal(got.Data, e.Data) {
				t.Fatalf("inclusion proof of seq %d in %d: %v (proved seq %d)", seq, c.Size, err, got.Seq)
			}
		}
		if _, err := auditlog.Prove(ctx, s, all[len(all)-1], cp); cp.Size < 100 && err == nil {
			t.Fatalf("seq 100 proved included in the checkpoint of %d", cp.Size)
		}
	}
	for i := range cps {
		for j := i; j < len(cps); j++ {
			p, err := auditlog.ProveConsistency(ctx, s, cps[i].Size, cps[j].Size)
			if err != nil {
				t.Fatal(err)
			}
			if err := auditlog.VerifyConsistency(p, roots[i], roots[j]); err != nil {
				t.Fatalf("consistency %d -> %d: %v", cps[i].Size, cps[j].Size, err)
			}
			if i < j && roots[i] != roots[j] {
				if err := auditlog.VerifyConsistency(p, roots[j], roots[i]); err == nil {
					t.Fatalf("consistency %d -> %d holds with the roots swapped", cps[i].Size, cps[j].Size)
				}
			}
		}
	}
	WantOK(t, Verify(t, s, v, cps[3].Note), 100, len(cps)+1)

	// LogRegistration finds an agent's agent.registered event.
	var reg kin.Event
	err = s.Update(ctx, func(tx store.Tx) error {
		e, err := kin.NewEvent(kin.EventAgentRegistered, 777, 0, map[string]any{"agent": 777})
		if err != nil {
			return err
		}
		e.Time = logTime
		reg, err = tx.EventAppend(ctx, e)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.LogRegistration(ctx, 777); err != nil || got.Seq != reg.Seq || !bytes.Equal(got.Data, reg.Data) || !got.Time.Equal(reg.Time) {
		t.Fatalf("LogRegistration = %+v, %v; want seq %d", got, err, reg.Seq)
	}
	if _, err := s.LogRegistration(ctx, 778); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("LogRegistration of an agent never registered: %v, want ErrNotFound", err)
	}
}

// testLogRefusesDataWithNewlines: event data must be compact JSON, one
// line, since the leaf is a line; refused events take no seq.
func testLogRefusesDataWithNewlines(t *testing.T, s store.Store) {
	ctx := context.Background()
	_, v := LogKey(t)
	var kept kin.Event
	err := s.Update(ctx, func(tx store.Tx) error {
		for _, data := range []string{"{\n}", "{\"a\":1,\n\"b\":2}", "{\"a\":1}\n"} {
			e := kin.Event{Time: logTime, Type: kin.EventAgentStatus, Agent: 1, Data: []byte(data)}
			if _, err := tx.EventAppend(ctx, e); err == nil || !strings.Contains(err.Error(), "newline") {
				return fmt.Errorf("data %q: EventAppend returned %v, want an error about newlines", data, err)
			}
		}
		// An escaped newline inside a string is compact JSON: it goes in,
		// as seq 1 (the refused ones took no seq).
		e, err := kin.NewEvent(kin.EventAgentStatus, 1, 0, map[string]string{"reason": "two\nlines"})
		if err != nil {
			return err
		}
		e.Time = logTime
		kept, err = tx.EventAppend(ctx, e)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if kept.Seq != 1 {
		t.Fatalf("the event after the refused ones has seq %d, want 1", kept.Seq)
	}
	CheckHead(t, s, []kin.Event{kept})
	WantOK(t, Verify(t, s, v, nil), 1, 0)
}

// testLogSurvivesReopen closes the store and opens it again (a second
// handle on the same store): the head, the checkpoints and the numbering
// go on.
func testLogSurvivesReopen(t *testing.T, s store.Store, reopen func() store.Store) {
	key, v := LogKey(t)
	var all []kin.Event
	for i := 0; i < 100; i += 10 {
		got, err := AppendEvents(t, s, i, i+10, nil)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, got...)
	}
	if _, err := AppendEvents(t, s, 100, 105, ErrBoom); !errors.Is(err, ErrBoom) {
		t.Fatal(err)
	}
	first := Checkpoint(t, s, key)
	size, root := LogHead(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = reopen()
	if size2, root2 := LogHead(t, s); size2 != size || root2 != root {
		t.Fatalf("after reopen LogHead = %d %s, before %d %s", size2, root2, size, root)
	}
	WantOK(t, Verify(t, s, v, nil), 100, 1)
	for i := 105; i < 230; i += 25 {
		got, err := AppendEvents(t, s, i, i+25, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got[0].Seq != int64(len(all)+1) {
			t.Fatalf("after reopen the next event has seq %d, want %d", got[0].Seq, len(all)+1)
		}
		all = append(all, got...)
	}
	CheckHead(t, s, all)
	Checkpoint(t, s, key)
	rep := Verify(t, s, v, first.Note)
	WantOK(t, rep, int64(len(all)), 3)
	if rep.Consistency == "" {
		t.Error("no consistency proof from the checkpoint kept before the reopen")
	}
}
