package sqlite

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/kin"
)

// TestRowCacheNeverStale: with the row cache on (OnlyWriter), readers of a
// large subtree's rows (AgentListByIDs, Daemon.Tree's; AgentRowsByIDs,
// the API's) race writers changing those rows (AgentUpdate,
// AgentUpdateStatus, AgentUpdateMany), and no read may answer a row older
// than a write whose Update had returned before the read began. Each write
// sets updated_at to a version that only grows per agent; a reader notes
// every agent's last returned version before it reads. It runs with the
// reads alone filling the cache (cold: no warmer), and once more with the
// warmer (rowwarm.go) filling it beside them.
func TestRowCacheNeverStale(t *testing.T) {
	t.Run("reads", func(t *testing.T) { testRowCacheNeverStale(t, true) })
	t.Run("warmed", func(t *testing.T) { testRowCacheNeverStale(t, false) })
}

func testRowCacheNeverStale(t *testing.T, cold bool) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "kin.db"), Options{Synchronous: "NORMAL", OnlyWriter: true, cold: cold})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const n = 3000 // above the cache's smallest read (cachedReadMin)
	ids := insertAgents(t, s, n)
	var version atomic.Int64 // the last version handed out
	version.Store(1)
	seen := make([]atomic.Int64, n) // by index in ids: the version of the last write that returned
	// Two writers, each on its own half of the agents (so that each
	// agent's versions commit in order), a few agents an Update.
	const updates = 300
	var writers sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 2 {
		writers.Add(1)
		go func() {
			defer writers.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for u := range updates {
				var pick []int
				for range 1 + rng.IntN(4) {
					pick = append(pick, 2*rng.IntN(n/2)+w)
				}
				v := version.Add(1)
				at := time.Unix(0, v)
				err := s.Update(ctx, func(tx store.Tx) error {
					switch u % 3 {
					case 0:
						cursor := strconv.FormatInt(v, 10)
						for _, i := range pick {
							if err := tx.AgentUpdate(ctx, store.AgentUpdateParams{ID: ids[i], At: at, Cursor: &cursor}); err != nil {
								return err
							}
						}
					case 1:
						for _, i := range pick {
							if err := tx.AgentUpdateStatus(ctx, store.AgentUpdateStatusParams{ID: ids[i], Status: kin.StatusSuspended, At: at}); err != nil {
								return err
							}
						}
					default:
						many := make([]kin.AgentID, len(pick))
						for k, i := range pick {
							many[k] = ids[i]
						}
						cursor := "many"
						return tx.AgentUpdateMany(ctx, many, store.AgentUpdateParams{At: at, Cursor: &cursor})
					}
					return nil
				})
				if err != nil {
					errs <- err
					return
				}
				for _, i := range pick {
					seen[i].Store(v)
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { writers.Wait(); close(done) }()
	index := make(map[kin.AgentID]int, n)
	for i, id := range ids {
		index[id] = i
	}
	// check compares what a read returned (versions by index) with what
	// had returned before it began.
	check := func(how string, before []int64, got map[int]int64) error {
		if len(got) != n {
			return fmt.Errorf("%s: %d agents, want %d", how, len(got), n)
		}
		for i, v := range got {
			if v < before[i] {
				return fmt.Errorf("%s: agent %d at version %d, but the write of version %d had returned before the read", how, ids[i], v, before[i])
			}
		}
		return nil
	}
	var reads atomic.Int64
	var readers sync.WaitGroup
	for r := range 2 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for k := 0; ; k++ {
				select {
				case <-done:
					return
				default:
				}
				before := make([]int64, n)
				for i := range seen {
					before[i] = seen[i].Load()
				}
				got := make(map[int]int64, n)
				how := "AgentListByIDs"
				if (k+r)%2 == 0 {
					as, err := s.AgentListByIDs(ctx, ids)
					if err != nil {
						errs <- err
						return
					}
					for _, a := range as {
						got[index[a.ID]] = a.UpdatedAt.UnixNano()
					}
				} else {
					how = "AgentRowsByIDs"
					err := s.AgentRowsByIDs(ctx, ids, func(records []byte) error {
						return eachUpdatedAt(records, func(id kin.AgentID, at int64) { got[index[id]] = at })
					})
					if err != nil {
						errs <- err
						return
					}
				}
				if err := check(how, before, got); err != nil {
					errs <- err
					return
				}
				reads.Add(1)
			}
		}()
	}
	readers.Wait()
	<-done
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if cold && s.CachedRows() == 0 {
		t.Fatal("the row cache holds nothing: the reads did not go through it")
	}
	t.Logf("%d reads, %d writes, %d rows cached", reads.Load(), 2*updates, s.CachedRows())
	// Quiet now: a read answers every row as last written, from the cache.
	as, err := s.AgentListByIDs(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range as {
		if want := seen[index[a.ID]].Load(); want != 0 && a.UpdatedAt.UnixNano() != want {
			t.Errorf("agent %d at version %d, want %d", a.ID, a.UpdatedAt.UnixNano(), want)
		}
	}
}

// eachUpdatedAt calls fn with the id and updated_at of each
// "<length>:<row>" record in records: the fields of a packed row are
// "<int>," or "<length>:<text>", id the 1st, updated_at the 17th.
func eachUpdatedAt(records []byte, fn func(kin.AgentID, int64)) error {
	s := string(records)
	for s != "" {
		l, rest, ok := cutInt(s, ':')
		if !ok || l > int64(len(rest)) {
			return fmt.Errorf("malformed record %.40q", s)
		}
		row := rest[:l]
		s = rest[l:]
		var id, at int64
		for f := 0; row != ""; f++ {
			v, after, ok := cutInt(row, ',')
			if ok {
				row = after
			} else if v, after, ok = cutInt(row, ':'); ok && v <= int64(len(after)) {
				row = after[v:]
				v = 0
			} else {
				return fmt.Errorf("malformed row field %d", f)
			}
			switch f {
			case 0:
				id = v
			case 16:
				at = v
			}
		}
		fn(kin.AgentID(id), at)
	}
	return nil
}

// cutInt reads the integer before the first sep in s.
func cutInt(s string, sep byte) (int64, string, bool) {
	for i := 0; i < len(s) && i < 21; i++ {
		if s[i] == sep {
			v, err := strconv.ParseInt(s[:i], 10, 64)
			return v, s[i+1:], err == nil
		}
	}
	return 0, "", false
}

// TestRowCacheWarmsWrittenRows: with the row cache on, the rows of the
// agents the writer inserts, and of those it changes (which a commit drops
// from the cache), are read into it in the background without any read
// asking (rowwarm.go); and a store opened again reads its newest agents'
// rows at start. Without the warmer the cache holds nothing here: no large
// read ran.
func TestRowCacheWarmsWrittenRows(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "kin.db")
	s, err := Open(ctx, path, Options{Synchronous: "NORMAL", OnlyWriter: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close() }()
	const n = 3000
	ids := insertAgents(t, s, n)
	waitCached := func(what string, want int) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for wait := time.Millisecond; s.CachedRows() != want; wait = min(2*wait, 100*time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d rows cached after 20 s, want %d", what, s.CachedRows(), want)
			}
			time.Sleep(wait)
		}
	}
	waitCached("inserted", n)

	// A change drops the rows it wrote; the warmer reads them again.
	cursor := "moved"
	at := time.Unix(0, 2)
	err = s.Update(ctx, func(tx store.Tx) error {
		for _, id := range ids[:100] {
			if err := tx.AgentUpdate(ctx, store.AgentUpdateParams{ID: id, At: at, Cursor: &cursor}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	waitCached("changed", n)
	// What the cache answers is the change (TestRowCacheNeverStale races
	// reads, writes and the warmer; this is the plain case).
	var stale []kin.AgentID
	err = s.AgentRowsByIDs(ctx, ids, func(records []byte) error {
		return eachUpdatedAt(records, func(id kin.AgentID, v int64) {
			if id <= ids[99] && v != 2 {
				stale = append(stale, id)
			}
		})
	})
	if err != nil || len(stale) > 0 {
		t.Fatalf("rows read after the change: %d stale (%v), %v", len(stale), stale[:min(len(stale), 5)], err)
	}

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(ctx, path, Options{Synchronous: "NORMAL", OnlyWriter: true})
	if err != nil {
		t.Fatal(err)
	}
	waitCached("reopened", n)
}

// TestRowCacheWarmingHeld: while a hold (HoldWarming) stands, the rows a
// commit changed are not read back into the cache, however long the
// warmer has waited; once it is released they are. The cancellation of a
// large subtree holds it from its plan to its record (issue 22).
func TestRowCacheWarmingHeld(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "kin.db"), Options{Synchronous: "NORMAL", OnlyWriter: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var _ store.WarmHolder = s
	const n = 500
	ids := insertAgents(t, s, n)
	waitFor := func(what string, within time.Duration, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(within)
		for wait := time.Millisecond; !ok(); wait = min(2*wait, 100*time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not after %s (%d rows cached)", what, within, s.CachedRows())
			}
			time.Sleep(wait)
		}
	}
	waitFor("the inserted rows cached", 20*time.Second, func() bool { return s.CachedRows() == n })

	release := s.HoldWarming()
	waits := s.WarmHeldWaits()
	stopping := kin.StateStopping
	err = s.Update(ctx, func(tx store.Tx) error {
		return tx.AgentUpdateMany(ctx, ids[:100], store.AgentUpdateParams{At: time.Unix(0, 2), State: &stopping})
	})
	if err != nil {
		t.Fatal(err)
	}
	// The warmer woke for the commit and is waiting for the release.
	waitFor("the warmer waiting for the hold", 20*time.Second, func() bool { return s.WarmHeldWaits() > waits })
	if got := s.CachedRows(); got != n-100 {
		t.Fatalf("held: %d rows cached, want %d (the changed rows read back while held)", got, n-100)
	}
	release()
	release() // twice is fine
	// Well within the 10 s after which a hold lapses (warmHoldMax): the
	// release itself lets it read.
	waitFor("the changed rows read back once released", 4*time.Second, func() bool { return s.CachedRows() == n })
}

// insertAgents inserts n registered agents a0, a1, ... (updated_at version
// 1) in one Update and returns their ids in that order.
func insertAgents(t *testing.T, s *Store, n int) []kin.AgentID {
	t.Helper()
	ctx := context.Background()
	ids := make([]kin.AgentID, n)
	err := s.Update(ctx, func(tx store.Tx) error {
		for i := range ids {
			a, err := tx.AgentInsert(ctx, store.AgentInsertParams{Agent: kin.Agent{
				Name: fmt.Sprintf("a%d", i), Role: "worker", Life: kin.LifeOwned, Status: kin.StatusActive,
				State: kin.StateRegistered, CreatedAt: time.Unix(0, 1), CreatedBy: kin.Operator, UpdatedAt: time.Unix(0, 1),
			}})
			if err != nil {
				return err
			}
			ids[i] = a.ID
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// TestLeanReadThroughTheCache: a large lean read by id (a cancellation's
// plan) served from the row cache's whole rows answers what SQLite's lean
// rows answer, field for field, the others zero, cold and warm; and it is
// served from the cache (its rows stay cached, none read again).
func TestLeanReadThroughTheCache(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "kin.db")
	s, err := Open(ctx, path, Options{Synchronous: "NORMAL", OnlyWriter: true, cold: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const n = 1500
	ids := insertAgents(t, s, n)
	// Some of the lean fields set: a command, a host, a grace, an end.
	ended := time.Unix(1700000000, 5)
	stopping := kin.StateStopping
	err = s.Update(ctx, func(tx store.Tx) error {
		if err := tx.AgentUpdateMany(ctx, ids[:300], store.AgentUpdateParams{At: time.Unix(0, 2), State: &stopping}); err != nil {
			return err
		}
		return tx.AgentUpdateMany(ctx, ids[300:400], store.AgentUpdateParams{At: time.Unix(0, 3), EndedAt: &ended})
	})
	if err != nil {
		t.Fatal(err)
	}
	// The same file through a handle without a row cache: SQLite's lean rows.
	plain, err := Open(ctx, path, Options{Synchronous: "NORMAL"})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	asked := append(slices.Clone(ids), 999999, ids[7]) // an unknown id, a repeated one
	want, err := plain.AgentListLeanByIDs(ctx, asked)
	if err != nil {
		t.Fatal(err)
	}
	for _, pass := range []string{"cold", "warm"} {
		got, err := s.AgentListLeanByIDs(ctx, asked)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) || len(got) != n {
			t.Fatalf("%s: %d lean rows, SQLite's %d, want %d", pass, len(got), len(want), n)
		}
		for i := range got {
			if !reflect.DeepEqual(got[i], want[i]) {
				t.Fatalf("%s: lean row %d\n got %+v\nwant %+v", pass, i, got[i], want[i])
			}
		}
		if c := s.CachedRows(); c != n {
			t.Fatalf("%s: %d rows cached after the lean read, want %d (it went through the cache)", pass, c, n)
		}
	}
}
