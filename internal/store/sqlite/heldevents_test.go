package sqlite

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/kin-agents/kin/internal/auditlog"
	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/internal/store/storetest"
	"github.com/kin-agents/kin/kin"
)

// A batch's events are held to its end and inserted there, many rows a
// statement (eventRowsPerInsert): an Update does not see its own events
// in the table (nothing in kin reads them back in a write transaction,
// as on PostgreSQL), and the log holds them once it committed.
func TestEventsAreInsertedAtTheBatchEnd(t *testing.T) {
	ctx := context.Background()
	s := openLog(t, filepath.Join(t.TempDir(), "kin.db"))
	var inTx int64 = -1
	err := s.Update(ctx, func(tx store.Tx) error {
		for i := range 3 {
			if _, err := tx.EventAppend(ctx, logEvent(t, i)); err != nil {
				return err
			}
		}
		var err error
		inTx, err = tx.EventLastSeq(ctx)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if inTx != 0 {
		t.Errorf("inside the Update the events table's last seq was %d: its events were inserted as appended, not held to the batch's end", inTx)
	}
	if n, err := s.EventLastSeq(ctx); err != nil || n != 3 {
		t.Fatalf("after the commit: last seq %d, %v; want 3", n, err)
	}
}

// However a batch's events are inserted (one INSERT each as appended, or
// held and inserted 1, 8 or 64 rows a statement), the stored log is the
// same, row for row and hash for hash, and verifies: across the
// statements' boundaries, Updates of one batch that fail in between
// (their events undone, the next ones' seqs closing the gap), and a store
// reopened.
func TestHeldEventsStoreTheSameLog(t *testing.T) {
	ctx := context.Background()
	_, v := testKey(t)
	boom := errors.New("undone")
	var want []auditlog.Entry
	for _, rows := range []int{-1, 1, 8, 64} {
		t.Run(fmt.Sprintf("rows=%d", rows), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "kin.db")
			s, err := Open(ctx, path, Options{eventRows: rows})
			if err != nil {
				t.Fatal(err)
			}
			// One Update of 157 events (64+64+8+8+8+1×5), then a batch
			// of Updates committed together, every third failing.
			next := 0
			if _, err := appendEvents(t, s, next, next+157, nil); err != nil {
				t.Fatal(err)
			}
			next += 157
			// The writer held inside an Update while the 12 queue up, one
			// after another (so every variant commits the same batch).
			release, blocking, held := make(chan struct{}), make(chan struct{}), make(chan error, 1)
			go func(from int) {
				held <- s.Update(ctx, func(tx store.Tx) error {
					for i := from; i < from+2; i++ {
						if _, err := tx.EventAppend(ctx, logEvent(t, i)); err != nil {
							return err
						}
					}
					close(blocking)
					<-release
					return nil
				})
			}(next)
			next += 2
			<-blocking
			errs := make(chan error, 12)
			for k := range 12 {
				from, n := next, 1+k*7
				next += n
				var fail error
				if k%3 == 1 {
					fail = boom
				}
				go func() {
					_, err := appendEvents(t, s, from, from+n, fail)
					if !errors.Is(err, fail) {
						err = fmt.Errorf("update %d: %v, want %v", k, err, fail)
					} else {
						err = nil
					}
					errs <- err
				}()
				for s.Queued() < k+1 {
					runtime.Gosched()
				}
			}
			close(release)
			if err := <-held; err != nil {
				t.Fatal(err)
			}
			for range 12 {
				if err := <-errs; err != nil {
					t.Error(err)
				}
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = openLog(t, path) // default rows: the log continues
			if _, err := appendEvents(t, s, next, next+9, nil); err != nil {
				t.Fatal(err)
			}
			var got []auditlog.Entry
			if err := s.LogEntries(ctx, func(e auditlog.Entry) error {
				got = append(got, e)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			for i, e := range got {
				if e.Event.Seq != int64(i+1) || e.Damaged != "" {
					t.Fatalf("entry %d: seq %d (%s)", i, e.Event.Seq, e.Damaged)
				}
			}
			wantOK(t, verify(t, s, v, nil), int64(len(got)), 0)
			if want == nil {
				want = got
				return
			}
			if len(got) != len(want) {
				t.Fatalf("%d events stored, %d with an INSERT per event", len(got), len(want))
			}
			for i := range got {
				g, w := got[i], want[i]
				if g.Event.Seq != w.Event.Seq || !g.Event.Time.Equal(w.Event.Time) || g.Event.Type != w.Event.Type ||
					g.Event.Agent != w.Event.Agent || g.Event.Parent != w.Event.Parent ||
					!bytes.Equal(g.Event.Data, w.Event.Data) || !bytes.Equal(g.Hashes, w.Hashes) {
					t.Fatalf("seq %d differs from the log stored an INSERT per event", g.Event.Seq)
				}
			}
		})
	}
}

func logEvent(t testing.TB, i int) kin.Event {
	t.Helper()
	e, err := storetest.NewLogEvent(i)
	if err != nil {
		t.Fatal(err)
	}
	return e
}
