package postgres

import (
	"context"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/kin-agents/kin/internal/store/sqlstore"
)

// Notifications (store.Notifier). Every batch that appended events sends
// NOTIFY kin_log inside its transaction; PostgreSQL delivers it at the
// COMMIT to every connection LISTENing on the database. Each Store keeps
// one such connection, its listener, and wakes its waiters when a
// notification carries a log size past what they were woken for: another
// handle's events (another daemon, another host) reach this handle's
// waiters as soon as they are committed, with no polling. The handle's own
// commits wake its waiters directly (sqlstore), before the notification
// comes back.
//
// A listener that loses its connection reconnects (backing off to a
// second) and then reads the log's size, waking the waiters for whatever
// was committed while it was away: a wake-up may come late, never not at
// all.

// maxBackoff bounds the wait between reconnections.
const maxBackoff = time.Second

// listen runs the listener from Open to Close. It reports the first
// LISTEN's outcome on ready.
func (s *Store) listen(ctx context.Context, ready chan<- error) {
	defer s.wg.Done()
	backoff := 10 * time.Millisecond
	first := true
	for {
		conn, err := s.subscribe(ctx)
		if first {
			ready <- err
			first = false
			if err != nil {
				return
			}
		}
		if err == nil {
			backoff = 10 * time.Millisecond
			s.wait(ctx, conn) // until the connection fails (reconnect) or Close cancels (stop)
			conn.Close(context.Background())
		}
		select {
		case <-s.stop:
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// subscribe connects and LISTENs, then wakes the waiters for what the log
// holds (commits made before the LISTEN took effect are not notified).
func (s *Store) subscribe(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, s.config.Copy())
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "LISTEN "+notifyChannel); err != nil {
		conn.Close(context.Background())
		return nil, err
	}
	var n int64
	if err := conn.QueryRow(ctx, sqlstore.LogSizeSQL).Scan(&n); err != nil {
		conn.Close(context.Background())
		return nil, err
	}
	s.Woken(n)
	return conn, nil
}

// wait wakes the waiters for each notification until the connection
// fails or Close cancels ctx.
func (s *Store) wait(ctx context.Context, conn *pgx.Conn) error {
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		if size, err := strconv.ParseInt(n.Payload, 10, 64); err == nil {
			s.Woken(size)
		}
	}
}
