// Package postgres is kin's store on PostgreSQL (pgx v5 through
// database/sql): one database that many kin daemons, on many hosts, share.
//
// The queries and the group-committing writer are package sqlstore's,
// shared with the SQLite driver; this package opens the database, migrates
// it, and says what PostgreSQL does its own way:
//
//   - the write lock: every batch's transaction first takes a
//     transaction-level advisory lock (pg_advisory_xact_lock), held until
//     its COMMIT, so Updates from every handle on the database are
//     serialised as SQLite's BEGIN IMMEDIATE serialises them, and what a
//     rule reads in an Update holds for its write; the log's next seq and
//     its right edge are read under that lock, so any number of handles
//     append one gapless log;
//   - durability: a commit returns once PostgreSQL has flushed its WAL
//     (synchronous_commit as the server sets it, on by default); a batch of
//     lazy Updates alone commits with synchronous_commit off: visible at
//     once, safe from a crash of kin, flushed within the server's
//     wal_writer_delay or by the next durable commit, lost only if the
//     server crashes before that;
//   - notifications: a batch that appended events sends NOTIFY kin_log
//     (the log's new size) inside its transaction, so PostgreSQL delivers
//     it at the COMMIT, to every handle LISTENing on the database
//     (listen.go), at once;
//   - ids: the next agent id is the largest plus one, read under the lock,
//     so a rolled-back registration leaves no gap (a sequence would), as on
//     SQLite; in a deferrable Update (a registration) the writer assigns it,
//     having read the largest with the log's size, and the insert rides
//     with the next statement (pipeline.go).
package postgres

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/kin-agents/kin/internal/auditlog"
	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/internal/store/sqlstore"
)

// Advisory lock keys (one 64-bit space per database; kin takes two).
const (
	writeLockKey   int64 = 0x6b696e2d77726974 // "kin-writ": held by every batch's transaction
	migrateLockKey int64 = 0x6b696e2d6d696772 // "kin-migr": held while one handle migrates
)

// notifyChannel is the channel a batch that appended events notifies,
// with the log's new size as its payload.
const notifyChannel = "kin_log"

// readers is the size of the read pool.
const readers = 8

// Store is the PostgreSQL store. Open it with Open; Close it once.
type Store struct {
	*sqlstore.Store
	name   string // Driver's: the DSN without secrets
	config *pgx.ConnConfig
	stop   chan struct{}
	cancel context.CancelFunc // ends the listener's wait
	wg     sync.WaitGroup
	closed sync.Once
	trips  *atomic.Int64 // the writer's round trips to the server
}

// WriterRoundTrips is how many round trips to the server the writer's
// connection has made (each statement sent alone, each pipeline, BEGIN,
// COMMIT): for benchmarks, which divide it by their Updates.
func (s *Store) WriterRoundTrips() int64 { return s.trips.Load() }

var (
	_ store.Store                = (*Store)(nil)
	_ store.LazyUpdater          = (*Store)(nil)
	_ store.Deferrer             = (*Store)(nil)
	_ auditlog.Source            = (*sqlstore.ReadOnly)(nil)
	_ store.Notifier             = (*Store)(nil)
	_ interface{ Close() error } = (*Store)(nil)
)

// dialect is PostgreSQL's: placeholders, the id list, the lock and the
// notification. It keeps no state of a handle's, so every Store shares it
// (and its cache of rebound queries).
var dialect = &sqlstore.Dialect{
	Name:         "postgres",
	Rebind:       Rebind,
	Begin:        begin,
	BeforeCommit: notify,
	Lost:         lost,
	// pgx caches every query's prepared statement on its connection.
	CachesStatements: true,
	// Each Update's RELEASE rides with the next SAVEPOINT, or the COMMIT.
	ChainSavepoints: true,
	// A deferrable Update's agent insert rides with the next statement.
	HoldInserts: true,
	// The held writes, the events and the COMMIT in one round trip; the
	// BEGIN and the lock with the first read.
	CommitInTx: true,
	Lateral:    true,
	// A batch's events in one statement.
	InsertEvents: insertEvents,
}

// Options tune a store. The zero value is the default.
type Options struct {
	// unhashed appends events without their tree hashes: only benchmarks
	// set it, to measure what hashing costs.
	unhashed bool
	// wrapWriter, when set, wraps the writer's connection to the server as
	// it is dialled: tests count its round trips on the wire.
	wrapWriter func(net.Conn) net.Conn
}

// Open connects to the database dsn names (a postgres:// or postgresql://
// URL, as pgx reads it), migrates it and starts the writer and the
// listener.
func Open(ctx context.Context, dsn string, opts Options) (*Store, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	name := describe(cfg)
	// The writer's connection holds each savepoint for the next statement
	// (pipeline.go).
	trips := new(atomic.Int64)
	wcfg := cfg.Copy()
	if wrap := opts.wrapWriter; wrap != nil {
		dial := wcfg.DialFunc
		wcfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return wrap(c), nil
		}
	}
	wdb := sql.OpenDB(pipelineConnector{Connector: stdlib.GetConnector(*wcfg), trips: trips})
	wdb.SetMaxOpenConns(1)
	wdb.SetMaxIdleConns(1)
	wdb.SetConnMaxLifetime(0)
	if err := wdb.PingContext(ctx); err != nil {
		wdb.Close()
		return nil, fmt.Errorf("postgres: connect to %s: %w", name, err)
	}
	if err := migrate(ctx, wdb); err != nil {
		wdb.Close()
		return nil, fmt.Errorf("postgres: %s: %w", name, err)
	}
	rdb := stdlib.OpenDB(*cfg.Copy())
	rdb.SetMaxOpenConns(readers)
	rdb.SetMaxIdleConns(readers)
	core, err := sqlstore.New(ctx, sqlstore.Config{Dialect: dialect, Writer: wdb, Readers: rdb, Unhashed: opts.unhashed})
	if err != nil {
		wdb.Close()
		rdb.Close()
		return nil, fmt.Errorf("%w (%s)", err, name)
	}
	s := &Store{Store: core, name: name, config: cfg, stop: make(chan struct{}), trips: trips}
	lctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	ready := make(chan error, 1)
	s.wg.Add(1)
	go s.listen(lctx, ready)
	if err := <-ready; err != nil {
		s.Close()
		return nil, fmt.Errorf("postgres: %s: listen: %w", name, err)
	}
	return s, nil
}

// Driver names the driver and the database, without secrets.
func (s *Store) Driver() string { return s.name }

// Close stops the listener and the writer (after the Updates already
// queued) and closes the connections. It is safe to call more than once.
func (s *Store) Close() error {
	var err error
	s.closed.Do(func() {
		close(s.stop)
		s.cancel()
		s.wg.Wait()
		err = s.Store.Close()
	})
	return err
}

// begin starts a batch's transaction and takes the database's write lock.
// Neither needs an answer: the writer's connection holds both and sends
// them with the batch's first read, the log's size (pipeline.go), where a
// failure of either fails that read (sqlstore.Ahead). A connection found
// ended there (a server restart, a failover, an administrator's
// pg_terminate_backend) is Lost: the writer begins once more, on a new
// connection, so the first Update after such an end does not fail for
// it; a BEGIN that failed before anything reached the server is tried
// once more here too.
func begin(ctx context.Context, w *sql.DB, lazy bool) (*sql.Tx, error) {
	tx, err := w.BeginTx(ctx, nil)
	if lost(err) {
		tx, err = w.BeginTx(ctx, nil) // BEGIN did nothing: safe to send again
	}
	if err != nil {
		return nil, err
	}
	q := `SELECT pg_advisory_xact_lock($1)`
	if lazy {
		// One round trip: the lock, then this transaction's durability.
		q = `SELECT pg_advisory_xact_lock($1), set_config('synchronous_commit', 'off', true)`
	}
	if _, err := tx.ExecContext(sqlstore.Ahead(ctx), q, writeLockKey); err != nil {
		tx.Rollback()
		return nil, fmt.Errorf("write lock: %w", err)
	}
	return tx, nil
}

// lost reports whether err says the connection ended under the statement:
// nothing was sent (pgconn.SafeToRetry), or the server said it is shutting
// the connection down (SQLSTATE class 57P: admin_shutdown, crash_shutdown,
// cannot_connect_now) or lost it (class 08, connection exception).
func lost(err error) bool {
	if err == nil || ctxErr(err) {
		return false
	}
	if pgconn.SafeToRetry(err) || errors.Is(err, driver.ErrBadConn) {
		return true
	}
	if pe := pgError(err); pe != nil {
		return strings.HasPrefix(pe.Code, "57P") || strings.HasPrefix(pe.Code, "08")
	}
	return false
}

// ctxErr reports whether err is a context's end, which no retry mends.
func ctxErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// insertEvents inserts a batch's events in one statement (one round trip),
// as columns of arrays that unnest turns into rows, and in the same
// statement queues the notification of the log's new size (notify's).
func insertEvents(ctx context.Context, tx *sql.Tx, rows []sqlstore.EventRow, size int64) error {
	n := len(rows)
	seq, at, agent, parent := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	typ, data, hashes := make([]string, n), make([]string, n), make([][]byte, n)
	for i, r := range rows {
		seq[i], at[i], typ[i], agent[i], parent[i], data[i], hashes[i] = r.Seq, r.Time, r.Type, r.Agent, r.Parent, r.Data, r.Hashes
	}
	_, err := tx.ExecContext(ctx, `WITH ins AS (INSERT INTO events (seq, time, type, agent_id, parent_id, data, hashes)
		SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::bigint[], $5::bigint[], $6::text[], $7::bytea[])
		RETURNING 1)
		SELECT pg_notify($8, $9), (SELECT count(*) FROM ins)`,
		seq, at, typ, agent, parent, data, hashes, notifyChannel, strconv.FormatInt(size, 10))
	return err
}

// notify queues the batch's notification, delivered at its COMMIT.
func notify(ctx context.Context, tx *sql.Tx, size int64) error {
	_, err := tx.ExecContext(ctx, `SELECT pg_notify($1, $2)`, notifyChannel, strconv.FormatInt(size, 10))
	return err
}

// describe is a connection's DSN without its password: the user, the host
// (a Unix socket's directory as ?host=) and the database.
func describe(cfg *pgx.ConnConfig) string {
	u := url.URL{Scheme: "postgres", User: url.User(cfg.User), Path: "/" + cfg.Database}
	if strings.HasPrefix(cfg.Host, "/") {
		u.RawQuery = url.Values{"host": {cfg.Host}}.Encode()
	} else {
		u.Host = cfg.Host
		if cfg.Port != 0 && cfg.Port != 5432 {
			u.Host += ":" + strconv.Itoa(int(cfg.Port))
		}
	}
	return u.String()
}

// OpenReadOnly connects to the database only to read its log (`kin log
// verify --db`): every transaction of the connection is read-only
// (default_transaction_read_only), and nothing is migrated.
func OpenReadOnly(ctx context.Context, dsn string) (*sqlstore.ReadOnly, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	name := describe(cfg)
	cfg.RuntimeParams["default_transaction_read_only"] = "on"
	db := stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(2)
	var version int
	if err := db.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&version); err != nil {
		db.Close()
		var missing bool
		if pe := pgError(err); pe != nil && pe.Code == "42P01" { // undefined_table
			missing = true
		}
		if missing {
			return nil, fmt.Errorf("postgres: %s is not a kin database (no schema_migrations table)", name)
		}
		return nil, fmt.Errorf("postgres: %s: %w", name, err)
	}
	return sqlstore.NewReadOnly(db, dialect), nil
}
