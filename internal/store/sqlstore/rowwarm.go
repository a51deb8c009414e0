package sqlstore

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kin-agents/kin/kin"
)

// The row cache's warmer (where there is a row cache): the rows of the
// agents this handle's writer inserted or changed are read into the cache
// in the background soon after their commit, and the newest agents' rows
// once at start, so that the first large read finds them there rather
// than SQLite packing each (issue 22: the first `kin tree` of 11,110
// agents read 11,110 cold rows, about 13 µs each, where a warm read costs
// a map lookup a row). A warm read is a read like any other (begin, the
// rows, fill): it never puts back a row a commit since its begin wrote,
// so the cache stays as right as a large read keeps it (rowcache.go).
// It reads what gathered over warmDelay in one statement, at most
// warmBatch ids at a time on one connection: a background reader that
// never takes both cores from a burst of spawns.
type rowWarmer struct {
	mu   sync.Mutex
	ids  []kin.AgentID // to read: in commit order, maybe repeated
	wake chan struct{} // signalled (never blocking) when ids grows
	// holds counts the HoldWarming not yet released; free is closed (and
	// replaced) when it comes back to 0. until is when the last hold
	// taken lapses (warmHoldMax after it): a hold its holder forgot
	// delays the warming, it never ends it.
	holds int
	free  chan struct{}
	until time.Time
	waits atomic.Int64 // times the warmer waited for a hold's release (WarmHeldWaits)
}

const (
	// warmDelay is how long the warmer lets commits gather before it reads
	// their rows: a spawn's two commits (its registration, its pid) are
	// then one read, and a burst's hundreds a few.
	warmDelay = 20 * time.Millisecond
	// warmBatch is the ids one read asks for: below parallelReadMin, so
	// one connection and one core.
	warmBatch = 2048
	// warmMaxPending bounds the ids waiting; past it, more are not
	// remembered (their rows go to the cache at the next large read, as
	// without a warmer).
	warmMaxPending = 1 << 16
	// warmAtStart is how many of the newest agents' rows are read at
	// start: about 6 MB of the cache's rowCacheBytes.
	warmAtStart = 16384
	// warmHoldMax is how long a hold (HoldWarming) holds at most: the
	// warmer reads once every hold is released or this long after the
	// last was taken.
	warmHoldMax = 10 * time.Second
)

// HoldWarming holds the warmer's reads until release (store.WarmHolder).
func (s *Store) HoldWarming() (release func()) {
	if s.warm == nil {
		return func() {}
	}
	return s.warm.hold()
}

// WarmHeldWaits is how many times the warmer has waited for a hold's
// release (HoldWarming): what it had to read waited with it.
func (s *Store) WarmHeldWaits() int64 {
	if s.warm == nil {
		return 0
	}
	return s.warm.waits.Load()
}

// hold is HoldWarming's.
func (w *rowWarmer) hold() (release func()) {
	w.mu.Lock()
	w.holds++
	w.until = time.Now().Add(warmHoldMax)
	w.mu.Unlock()
	return sync.OnceFunc(func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.holds--; w.holds == 0 {
			close(w.free)
			w.free = make(chan struct{})
			select { // what waited for it (warmLoop's reads between two batches) is read now
			case w.wake <- struct{}{}:
			default:
			}
		}
	})
}

// held returns a channel closed once no hold is left, and how long the
// holds last at most; nil when none is left, or they have lapsed.
func (w *rowWarmer) held() (<-chan struct{}, time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	left := time.Until(w.until)
	if w.holds == 0 || left <= 0 {
		return nil, 0
	}
	return w.free, left
}

func newRowWarmer() *rowWarmer {
	return &rowWarmer{wake: make(chan struct{}, 1), free: make(chan struct{})}
}

// add queues ids to be read.
func (w *rowWarmer) add(ids []kin.AgentID) {
	if len(ids) == 0 {
		return
	}
	w.mu.Lock()
	if len(w.ids)+len(ids) <= warmMaxPending {
		w.ids = append(w.ids, ids...)
	}
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// take returns up to n of the queued ids, oldest first, and forgets them.
func (w *rowWarmer) take(n int) []kin.AgentID {
	w.mu.Lock()
	defer w.mu.Unlock()
	n = min(n, len(w.ids))
	out := slices.Clone(w.ids[:n])
	w.ids = append(w.ids[:0], w.ids[n:]...)
	return out
}

// warmLoop is the warmer's goroutine: the newest rows first, then the
// rows of each gathering of commits, until the store closes.
func (s *Store) warmLoop(ctx context.Context) {
	defer s.wg.Done()
	if ids, err := s.newestAgents(ctx, warmAtStart); err == nil {
		s.warm.add(ids)
	}
	// A warm read that fails is dropped: the rows are read, and cached,
	// by the next large read that wants them, as without a warmer.
	for {
		// Held (HoldWarming): what gathers meanwhile is read once released.
		for free, left := s.warm.held(); free != nil; free, left = s.warm.held() {
			s.warm.waits.Add(1)
			t := time.NewTimer(left)
			select {
			case <-free:
			case <-t.C:
			case <-s.stop:
				t.Stop()
				return
			}
			t.Stop()
		}
		for {
			if free, _ := s.warm.held(); free != nil {
				break // held between two reads: the rest waits for the release
			}
			ids := s.warm.take(warmBatch)
			if len(ids) == 0 {
				break
			}
			s.warmRows(ctx, ids) //nolint:errcheck // see above
			if ctx.Err() != nil {
				return
			}
		}
		select {
		case <-s.stop:
			return
		case <-s.warm.wake:
		}
		select { // let the commits gather
		case <-s.stop:
			return
		case <-time.After(warmDelay):
		}
	}
}

// newestAgents is the ids of the n newest agents, newest first.
func (s *Store) newestAgents(ctx context.Context, n int) ([]kin.AgentID, error) {
	rows, err := s.reader.query(ctx, `SELECT id FROM agents ORDER BY id DESC LIMIT ?`, n)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []kin.AgentID
	for rows.Next() {
		var id kin.AgentID
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// warmRows reads into the row cache the rows of ids it does not hold.
func (s *Store) warmRows(ctx context.Context, ids []kin.AgentID) error {
	c := s.rc
	since := c.begin()
	slices.Sort(ids)
	ids = slices.Compact(ids)
	rows := make([]string, len(ids))
	missing := c.get(ids, rows)
	if missing == 0 {
		return nil
	}
	return s.reader.readMissing(ctx, c, since, ids, rows, missing, func(kin.AgentID, []byte, string) error { return nil })
}
