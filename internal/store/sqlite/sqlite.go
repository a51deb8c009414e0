// Package sqlite is kin's embedded store: a single SQLite file in WAL mode
// (modernc.org/sqlite, pure Go, so CGO_ENABLED=0 builds work).
//
// Writes go through one goroutine that commits concurrent Updates together
// (group commit): each Update runs in its own savepoint inside a shared
// transaction, so a failing Update undoes only its own writes, and every
// caller is answered only after the shared commit is on disk
// (synchronous=FULL). This keeps durable commits cheap under load while
// Updates stay strictly serialised, which is what makes the governor's
// checks atomic with the writes they guard.
//
// Several Stores may open one file (other processes, or this one): the
// write transactions (BEGIN IMMEDIATE) serialise their writers, nothing
// kept in memory decides a write without being checked inside the
// transaction (the log's edge, see eventlog.go), and each Store's waiters
// learn of the others' commits by polling (notify.go).
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"github.com/kin-agents/kin/internal/auditlog"
	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/internal/store/inmem"
)

// maxBatch bounds how many Updates one commit carries.
const maxBatch = 256

// Store is the SQLite store. Open it with Open; Close it once.
type Store struct {
	reader
	wstmts *stmts
	path   string
	// sync is the synchronous level the store was opened with; syncNow the
	// writer connection's (NORMAL for a batch of lazy Updates alone).
	sync, syncNow string
	wdb           *sql.DB // one connection: the writer
	rdb           *sql.DB // a pool of read-only connections
	pdb           *sql.DB // one read-only connection: the poller's (data_version is per connection)
	queue         chan *update
	stop          chan struct{}
	wg            sync.WaitGroup
	closed        sync.Once
	mu            sync.RWMutex // guards done against Update racing Close
	done          bool

	unhashed bool              // benchmarks only: events without tree hashes
	logMu    sync.Mutex        // guards log
	log      auditlog.Frontier // a cache of the committed tree's edge, checked in every write transaction; setLog only moves it forward

	hub      *inmem.Hub   // wakes this handle's waiters (notify.go)
	notified atomic.Int64 // the largest log size waiters were woken for
}

type update struct {
	ctx  context.Context
	fn   func(store.Tx) error
	err  chan error
	lazy bool // UpdateLazy's: its batch need not reach the disk before it returns
}

var _ store.Store = (*Store)(nil)

// Options tune a store. The zero value is the durable default.
type Options struct {
	// Synchronous is SQLite's synchronous pragma: "FULL" (default, durable
	// across power loss) or "NORMAL" (durable across a crash of the process).
	Synchronous string
	// unhashed appends events without their tree hashes: only benchmarks
	// set it, to measure what hashing costs.
	unhashed bool
}

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
	base := "file:" + (&url.URL{Path: path}).EscapedPath()
	pragmas := "_pragma=busy_timeout(10000)&_pragma=foreign_keys(1)&_pragma=journal_mode(WAL)&_pragma=synchronous(" + sync + ")"
	wdb, err := sql.Open("sqlite", base+"?_txlock=immediate&"+pragmas)
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
	tree, err := loadLog(ctx, reader{q: wdb})
	if err != nil {
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
	wstmts := newStmts(wdb, false)
	if err := wstmts.prepare(ctx, writerStatements()); err != nil {
		wstmts.close()
		wdb.Close()
		rdb.Close()
		pdb.Close()
		return nil, fmt.Errorf("sqlite: prepare: %w", err)
	}
	s := &Store{
		reader:  reader{q: rdb, st: newStmts(rdb, true)},
		wstmts:  wstmts,
		path:    path,
		sync:    sync,
		syncNow: sync,
		wdb:     wdb,
		rdb:     rdb,
		pdb:     pdb,
		queue:   make(chan *update, maxBatch),
		stop:    make(chan struct{}),

		unhashed: opts.unhashed,
		log:      tree,
		hub:      inmem.NewHub(),
	}
	s.notified.Store(tree.Size())
	s.wg.Add(2)
	go s.writeLoop()
	go s.pollOthers()
	return s, nil
}

// Driver names the driver and the file.
func (s *Store) Driver() string { return "sqlite:" + s.path }

// Close stops the writer after the Updates already queued and closes the
// database. It is safe to call more than once.
func (s *Store) Close() error {
	var err error
	s.closed.Do(func() {
		s.mu.Lock()
		s.done = true
		s.mu.Unlock()
		close(s.stop)
		s.wg.Wait()
		err = errors.Join(s.reader.st.close(), s.wstmts.close(), s.rdb.Close(), s.wdb.Close(), s.pdb.Close())
	})
	return err
}

// Update queues fn for the writer and waits for its durable result.
func (s *Store) Update(ctx context.Context, fn func(store.Tx) error) error {
	return s.update(ctx, fn, false)
}

// UpdateLazy is Update, except that a batch of lazy Updates alone commits
// with synchronous=NORMAL: committed, visible and safe from a crash of the
// process when it returns, on the disk with the next durable commit (the
// WAL is one file, appended in order, so that commit's sync covers it). A
// batch that also holds an Update is durable as a whole.
func (s *Store) UpdateLazy(ctx context.Context, fn func(store.Tx) error) error {
	return s.update(ctx, fn, true)
}

func (s *Store) update(ctx context.Context, fn func(store.Tx) error, lazy bool) error {
	u := &update{ctx: ctx, fn: fn, err: make(chan error, 1), lazy: lazy}
	s.mu.RLock()
	if s.done {
		s.mu.RUnlock()
		return store.ErrClosed
	}
	select {
	case s.queue <- u:
		s.mu.RUnlock()
	case <-ctx.Done():
		s.mu.RUnlock()
		return ctx.Err()
	}
	// Once queued, the writer always answers: waiting for it (rather than
	// for ctx) means a caller never returns while its write may still land.
	return <-u.err
}

func (s *Store) writeLoop() {
	defer s.wg.Done()
	batch := make([]*update, 0, maxBatch)
	for {
		select {
		case u := <-s.queue:
			batch = append(batch[:0], u)
		case <-s.stop:
			// Answer whatever was queued before Close took the lock.
			for {
				select {
				case u := <-s.queue:
					s.commit([]*update{u})
				default:
					return
				}
			}
		}
	more:
		for len(batch) < maxBatch {
			select {
			case u := <-s.queue:
				batch = append(batch, u)
			default:
				break more
			}
		}
		s.commit(batch)
	}
}

// commit runs a batch of Updates in one transaction, each in a savepoint.
func (s *Store) commit(batch []*update) {
	errs := make([]error, len(batch))
	answer := func() {
		for i, u := range batch {
			u.err <- errs[i]
		}
	}
	ctx := context.Background()
	if err := s.syncFor(ctx, batch); err != nil {
		for i := range errs {
			errs[i] = err
		}
		answer()
		return
	}
	tx, err := s.wdb.BeginTx(ctx, nil)
	if err != nil {
		for i := range errs {
			errs[i] = fmt.Errorf("sqlite: begin: %w", err)
		}
		answer()
		return
	}
	ok, appended := 0, 0
	local := map[string]*sql.Stmt{} // closed with the transaction
	cache := &batchCache{}
	// The batch's tree: the cached edge, checked against the stored log
	// under the write lock (another handle on the file may have appended).
	// s.log changes only once the batch commits.
	tree, err := s.edge(ctx, reader{q: tx, tx: tx, st: s.wstmts, local: local})
	if err != nil {
		tx.Rollback()
		for i := range errs {
			errs[i] = fmt.Errorf("sqlite: event log: %w", err)
		}
		answer()
		return
	}
	for i, u := range batch {
		if err := u.ctx.Err(); err != nil {
			errs[i] = err
			continue
		}
		if _, err := s.savepoint(ctx, tx, sqlSavepoint); err != nil {
			errs[i] = fmt.Errorf("sqlite: savepoint: %w", err)
			continue
		}
		saved := tree
		t := &txn{reader: reader{q: tx, tx: tx, st: s.wstmts, local: local}, log: &tree, unhashed: s.unhashed, batch: cache}
		errs[i] = runUpdate(u, t)
		if errs[i] != nil {
			tree = saved
			cache.forget() // what it read may include its undone writes
			if _, err := s.savepoint(ctx, tx, sqlRollbackTo); err != nil {
				// The transaction is in an unknown state: fail the batch.
				tx.Rollback()
				for j := range errs {
					if errs[j] == nil || j == i {
						errs[j] = fmt.Errorf("sqlite: rollback to savepoint: %w", err)
					}
				}
				answer()
				return
			}
		} else {
			ok++
			appended += t.appended
		}
		if _, err := s.savepoint(ctx, tx, sqlRelease); err != nil {
			errs[i] = fmt.Errorf("sqlite: release savepoint: %w", err)
		}
	}
	if ok == 0 {
		err = tx.Rollback()
	} else {
		err = tx.Commit()
	}
	if err != nil {
		for i := range errs {
			if errs[i] == nil {
				errs[i] = fmt.Errorf("sqlite: commit: %w", err)
			}
		}
	} else if ok > 0 {
		s.setLog(tree)
		if appended > 0 {
			storeMax(&s.notified, tree.Size())
			s.hub.Notify()
		}
	}
	answer()
}

// syncFor sets the writer's synchronous level for batch: NORMAL when every
// Update in it is lazy and the store is FULL, else the store's own. SQLite
// refuses the change inside a transaction, so it is made before BEGIN, and
// only when the level differs from the last batch's.
func (s *Store) syncFor(ctx context.Context, batch []*update) error {
	want := s.sync
	if want == "FULL" {
		lazy := true
		for _, u := range batch {
			lazy = lazy && u.lazy
		}
		if lazy {
			want = "NORMAL"
		}
	}
	if want == s.syncNow {
		return nil
	}
	if _, err := s.wdb.ExecContext(ctx, "PRAGMA synchronous="+want); err != nil {
		return fmt.Errorf("sqlite: synchronous=%s: %w", want, err)
	}
	s.syncNow = want
	return nil
}

// The savepoint each Update runs in, prepared on the writer's connection
// like the hot statements (run unprepared, each was compiled per Update).
const (
	sqlSavepoint  = "SAVEPOINT u"
	sqlRollbackTo = "ROLLBACK TO u"
	sqlRelease    = "RELEASE u"
)

func (s *Store) savepoint(ctx context.Context, tx *sql.Tx, q string) (sql.Result, error) {
	if st := s.wstmts.get(ctx, q); st != nil {
		return tx.StmtContext(ctx, st).ExecContext(ctx)
	}
	return tx.ExecContext(ctx, q)
}

// edge returns the tree's committed edge as the transaction r sees it: the
// cache when the stored log has its size (one indexed read), else reloaded
// from the stored hashes, as Open does. Inside the write transaction no
// other handle can append until the commit, so the seqs and hashes the
// batch appends continue the stored log, whoever wrote it last.
func (s *Store) edge(ctx context.Context, r reader) (auditlog.Frontier, error) {
	s.logMu.Lock()
	f := s.log
	s.logMu.Unlock()
	if s.unhashed {
		return f, nil // benchmarks only: no hashes to continue, seqs from SQLite
	}
	n, err := logSize(ctx, r)
	if err != nil || n == f.Size() {
		return f, err
	}
	if f, err = loadFrontier(ctx, r, n); err == nil {
		s.setLog(f) // others' commits, read before this batch wrote anything
	}
	return f, err
}

func runUpdate(u *update, tx *txn) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("sqlite: update panicked: %v", r)
		}
	}()
	return u.fn(tx)
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
