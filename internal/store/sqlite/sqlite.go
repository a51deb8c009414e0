// Package sqlite is kin's embedded store: a single SQLite file in WAL mode
// (modernc.org/sqlite, pure Go, so CGO_ENABLED=0 builds work).
//
// The queries and the group-committing writer are package sqlstore's,
// shared with the PostgreSQL driver; this package opens the file, migrates
// it, and says what SQLite does its own way: the write lock is BEGIN
// IMMEDIATE's, a commit is on disk with synchronous=FULL (NORMAL for a
// batch of lazy Updates alone; a batch of early ones commits NORMAL and is
// synced as FULL would once it is answered: syncWAL), and a handle learns
// of other handles' commits on the same file by polling (notify.go).
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"github.com/kin-agents/kin/internal/auditlog"
	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/internal/store/sqlstore"
)

// Store is the SQLite store. Open it with Open; Close it once.
type Store struct {
	*sqlstore.Store
	path string
	// lock is the writers' lock (writers.go), held until Close, which
	// closes it after the database's connections; the writer's begin takes
	// it shared before the handle's first write (only the writer
	// goroutine uses it after Open).
	lock *writers
	// sync is the synchronous level the store was opened with; syncNow the
	// writer connection's (NORMAL for a batch of lazy Updates alone).
	sync, syncNow string
	// wal is the write-ahead log, open for syncWAL (only the writer
	// goroutine uses it); nil until the first sync.
	wal    *os.File
	writer *sql.DB // the writer's one connection (sqlstore's; kept here for its pragmas' test)
	pdb    *sql.DB // one read-only connection: the poller's (data_version is per connection)
	stop   chan struct{}
	wg     sync.WaitGroup
	closed sync.Once
}

var (
	_ store.Store         = (*Store)(nil)
	_ store.LazyUpdater   = (*Store)(nil)
	_ store.Deferrer      = (*Store)(nil)
	_ store.EarlyDeferrer = (*Store)(nil)
	_ auditlog.Source     = (*sqlstore.ReadOnly)(nil)
)

// Options tune a store. The zero value is the durable default.
type Options struct {
	// Synchronous is SQLite's synchronous pragma: "FULL" (default, durable
	// across power loss) or "NORMAL" (durable across a crash of the process).
	Synchronous string
	// OnlyWriter says the caller means to be the file's only writer while
	// the store is open (a daemon on its home's kin.db): the rows of large
	// reads by id are then kept in memory between reads (sqlstore's
	// Config.RowCache), which learns of changes only from this handle's
	// commits. The writers' lock beside the file (writers.go) holds it to
	// that: a handle of this package opened on the file meanwhile is
	// refused (ErrNotOnlyWriter), and where one was open already the rows
	// are not kept. A process writing the file by other means is not seen.
	OnlyWriter bool
	// unhashed appends events without their tree hashes: only benchmarks
	// set it, to measure what hashing costs.
	unhashed bool
	// cold: no warmer for the row cache (sqlstore's Config.Cold); only
	// tests set it.
	cold bool
	// eventRows is the events per INSERT (Dialect.EventRowsPerInsert):
	// 0 is eventRowsPerInsert, below 0 an INSERT per event as EventAppend
	// makes it. Only benchmarks set it.
	eventRows int
}

// eventRowsPerInsert is how many of a batch's events one INSERT stores
// (sqlstore's Dialect.EventRowsPerInsert): the batch's events are held to
// its end and inserted 64 rows a statement, then 8, then 1, rather than
// one statement each as they are appended (a cascade's record appends
// two per agent). BenchmarkEventInsertRows measures the choice.
const eventRowsPerInsert = 64

// writerCacheKiB is the writer connection's page cache (PRAGMA
// cache_size, in KiB as SQLite counts it; the readers keep the default,
// 2,000). SQLite's default cost the daemon about 4 MiB, not 2: each
// cached page is 4 KiB of data and about 200 bytes of headers, one
// allocation, which modernc.org/memory (the allocator of the pure-Go
// SQLite) serves from its 8 KiB size class. The writer is the only
// connection whose cache survives a commit (a reader's is dropped when the
// file changed since its last read, i.e. after every write), and its
// pages come from the OS's page cache when they are not in it: 512 KiB,
// about 120 pages, held the interior pages of the tables and indexes each
// registration and cascade touches, with no measurable CPU cost in
// BenchmarkRegister/store-update-c64 or BenchmarkCascade1000 against the
// default, and 3.3 MiB less anonymous memory in BenchmarkDaemonMemory2000
// (issue 22).
const writerCacheKiB = 512

// bulkMmap is the file's size a reader maps (PRAGMA mmap_size) for one
// chunk of a large read (sqlstore's Dialect.BulkReadOn; parallelReadMin
// agents or more: a 10,000-agent subtree, the forest): SQLite then takes
// the pages it reads from the mapping instead of a pread each into its
// page cache, whose 2,000 KiB a subtree spread over the table (every page
// of it) goes through again at every read. That was about a fifth of the
// daemon's CPU per 10,000-agent subtree (BenchmarkSubtree). The mapping
// is dropped (mmap_size 0) once the chunk's rows are read: the file's
// pages it touched count in the daemon's resident memory while it is
// mapped, and kept mapped they would stay counted (a reader maps the
// whole file, up to this size). Only the pages read are faulted in.
const bulkMmap = 1 << 30

// readDialect is SQLite's SQL for a handle that only reads: the queries
// are written in it.
var readDialect = &sqlstore.Dialect{Name: "sqlite"}

// Open opens (creating if needed) the database file at path and migrates it.
func Open(ctx context.Context, path string, opts Options) (*Store, error) {
	if path == "" {
		return nil, errors.New("sqlite: empty database path")
	}
	sync := opts.Synchronous
	if sync == "" {
		sync = "FULL"
	}
	if sync != "FULL" && sync != "NORMAL" {
		return nil, fmt.Errorf("sqlite: synchronous must be FULL or NORMAL, not %q", sync)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	lock, onlyWriter, err := openWriters(path, opts.OnlyWriter)
	if err != nil {
		return nil, err
	}
	st, err := open(ctx, path, sync, opts, onlyWriter, lock)
	if err != nil {
		lock.close()
		return nil, err
	}
	return st, nil
}

// open is Open once the writers' file is open; onlyWriter says its lock
// is held exclusively.
func open(ctx context.Context, path, sync string, opts Options, onlyWriter bool, lock *writers) (*Store, error) {
	base := "file:" + (&url.URL{Path: path}).EscapedPath()
	pragmas := "_pragma=busy_timeout(10000)&_pragma=foreign_keys(1)&_pragma=journal_mode(WAL)&_pragma=synchronous(" + sync + ")"
	// The writer's temporary files in memory: each Update's savepoint
	// copies the pages it first changes to a sub-journal, a temporary
	// file written with a system call per page (4 % of the daemon's CPU
	// in the API's registrations); it only ever serves a ROLLBACK TO in
	// the same transaction, never a recovery.
	//
	// The writer's page cache is writerCacheKiB, not SQLite's default.
	wdb, err := sql.Open("sqlite", base+"?_txlock=immediate&_pragma=temp_store(2)&_pragma=cache_size("+strconv.Itoa(-writerCacheKiB)+")&"+pragmas)
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	wdb.SetMaxOpenConns(1)
	wdb.SetMaxIdleConns(1)
	wdb.SetConnMaxLifetime(0)
	if err := ping(ctx, wdb); err != nil {
		wdb.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		wdb.Close()
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	if err := migrate(ctx, wdb); err != nil {
		wdb.Close()
		return nil, fmt.Errorf("sqlite: %s: %w", path, err)
	}
	rdb, err := sql.Open("sqlite", base+"?"+pragmas+"&_pragma=query_only(1)")
	if err != nil {
		wdb.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	rdb.SetMaxOpenConns(8)
	rdb.SetMaxIdleConns(8)
	pdb, err := openPoller(ctx, base, pragmas)
	if err != nil {
		wdb.Close()
		rdb.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	s := &Store{path: path, sync: sync, syncNow: sync, writer: wdb, pdb: pdb, stop: make(chan struct{}), lock: lock}
	rows := opts.eventRows
	switch {
	case rows == 0:
		rows = eventRowsPerInsert
	case rows < 0:
		rows = 0
	}
	d := &sqlstore.Dialect{
		Name:               "sqlite",
		Begin:              s.begin,
		Sync:               s.syncWAL,
		WriterStatements:   true, // compiling was a quarter of the writer's time
		InsertRowID:        true,
		EventRowsPerInsert: rows,
		BulkReadOn:         "PRAGMA mmap_size = " + strconv.Itoa(bulkMmap),
		BulkReadOff:        "PRAGMA mmap_size = 0",
	}
	core, err := sqlstore.New(ctx, sqlstore.Config{Dialect: d, Writer: wdb, Readers: rdb, Unhashed: opts.unhashed, OnlyWriter: onlyWriter, Cold: opts.cold})
	if err != nil {
		wdb.Close()
		rdb.Close()
		pdb.Close()
		return nil, fmt.Errorf("%w (%s)", err, path)
	}
	s.Store = core
	s.wg.Add(1)
	go s.pollOthers()
	return s, nil
}

// Driver names the driver and the file.
func (s *Store) Driver() string { return "sqlite:" + s.path }

// Close stops the poller and the writer (after the Updates already queued)
// and closes the database. It is safe to call more than once.
func (s *Store) Close() error {
	var err error
	s.closed.Do(func() {
		close(s.stop)
		s.wg.Wait()
		err = errors.Join(s.Store.Close(), s.pdb.Close())
		if s.wal != nil { // the writer has stopped
			s.wal.Close()
		}
		s.lock.close()
	})
	return err
}

// begin starts a batch's transaction: BEGIN IMMEDIATE (the DSN's _txlock)
// takes the file's write lock. A batch of lazy Updates alone runs with
// synchronous=NORMAL when the store is FULL: SQLite refuses the change
// inside a transaction, so it is made before BEGIN, and only when the level
// differs from the last batch's. (Only the writer goroutine calls begin.)
func (s *Store) begin(ctx context.Context, w *sql.DB, lazy bool) (*sql.Tx, error) {
	if err := s.lock.share(); err != nil {
		return nil, err
	}
	want := s.sync
	if want == "FULL" && lazy {
		want = "NORMAL"
	}
	if want != s.syncNow {
		if _, err := w.ExecContext(ctx, "PRAGMA synchronous="+want); err != nil {
			return nil, fmt.Errorf("synchronous=%s: %w", want, err)
		}
		s.syncNow = want
	}
	return w.BeginTx(ctx, nil)
}

// syncWAL makes every commit so far durable as synchronous=FULL makes
// each: a batch of early Updates (sqlstore's UpdateEarlyDeferrable) commits
// with synchronous=NORMAL, which in WAL mode writes the log's frames
// without syncing them, and is synced here once answered. SQLite's FULL
// commit is that very fdatasync of the log, and nothing else: with
// powersafe overwrite (the default) a commit pads nothing, and the log's
// header is synced, at NORMAL too, whenever the log restarts. The log is
// opened once, and again should its file no longer be the one at its path
// (a log is removed only when the last connection to the database closes,
// and the writer's stays open), with its directory synced then, as SQLite
// syncs it for a new log. A store opened NORMAL syncs nothing: that is
// its durability. Only the writer goroutine calls it.
func (s *Store) syncWAL() error {
	if s.sync != "FULL" {
		return nil
	}
	path := s.path + "-wal"
	if s.wal != nil {
		if same, err := sameFile(s.wal, path); err != nil || !same {
			s.wal.Close()
			s.wal = nil
		}
	}
	if s.wal == nil {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		if err := syncDir(filepath.Dir(path)); err != nil {
			f.Close()
			return err
		}
		s.wal = f
	}
	return unix.Fdatasync(int(s.wal.Fd()))
}

// sameFile reports whether f is the file at path.
func sameFile(f *os.File, path string) (bool, error) {
	a, err := f.Stat()
	if err != nil {
		return false, err
	}
	b, err := os.Stat(path)
	if err != nil {
		return false, err
	}
	return os.SameFile(a, b), nil
}

// syncDir syncs the directory dir's entries.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// ping opens db's first connection. Its pragmas switch a new file to WAL,
// which answers SQLITE_BUSY at once, without the busy timeout, while
// another process opening the same new file holds its lock: that is
// retried, for as long as the busy timeout would have waited.
func ping(ctx context.Context, db *sql.DB) error {
	deadline := time.Now().Add(10 * time.Second)
	wait := time.Millisecond
	for {
		err := db.PingContext(ctx)
		if err == nil || !isBusy(err) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, 50*time.Millisecond)
	}
}

// isBusy reports whether err is SQLite's SQLITE_BUSY (or an extended code
// of it).
func isBusy(err error) bool {
	var coded interface{ Code() int }
	return errors.As(err, &coded) && coded.Code()&0xff == 5
}
