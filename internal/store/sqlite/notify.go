package sqlite

import (
	"context"
	"database/sql"
	"time"

	"github.com/kin-agents/kin/internal/store/sqlstore"
)

// Notifications (store.Notifier). The writer wakes this handle's waiters
// after every commit that appended events. Commits by other handles on the
// same file (another process, or another Open in this one) are seen by
// polling: while anyone waits, a goroutine asks SQLite every pollInterval
// whether the database changed (PRAGMA data_version, on a connection of its
// own) and, when it did and the log grew past what waiters were last woken
// for, wakes them. So another handle's events reach this handle's waiters
// within about pollInterval; this handle's own, as soon as they are
// durable. Nobody waiting, nothing polls.

// pollInterval is how often the poller looks for other handles' commits
// while anyone waits.
const pollInterval = 50 * time.Millisecond

// openPoller opens the poller's own read-only connection: data_version
// compares commits seen by one connection, so it must stay the same one.
func openPoller(ctx context.Context, base, pragmas string) (*sql.DB, error) {
	db, err := sql.Open("sqlite", base+"?"+pragmas+"&_pragma=query_only(1)")
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	if err := ping(ctx, db); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// pollOthers wakes this handle's waiters for other handles' commits. It
// runs from Open to Close, and polls only while someone waits.
func (s *Store) pollOthers() {
	defer s.wg.Done()
	ctx := context.Background() // Close waits for this loop before it closes pdb
	t := time.NewTimer(pollInterval)
	t.Stop()
	version := int64(-1) // the first poll always looks at the log
	for {
		if !s.Hub().Waited() {
			select {
			case <-s.stop:
				return
			case <-s.Hub().Waiting():
			}
		}
		t.Reset(pollInterval)
		select {
		case <-s.stop:
			t.Stop()
			return
		case <-t.C:
		}
		var v int64
		if err := s.pdb.QueryRowContext(ctx, `PRAGMA data_version`).Scan(&v); err != nil || v == version {
			continue // an error: try again at the next tick (Close ends the loop)
		}
		version = v
		var size int64
		if err := s.pdb.QueryRowContext(ctx, sqlstore.LogSizeSQL).Scan(&size); err != nil {
			version = -1
			continue
		}
		s.Woken(size)
	}
}
