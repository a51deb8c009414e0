// Package sqlstore is what kin's two SQL drivers share: every query and
// write of store.Store written once, over database/sql, and the writer that
// commits concurrent Updates together (group commit). store/sqlite and
// store/postgres each open their database, migrate it, say how their SQL
// differs (a Dialect) and how other handles' commits reach their waiters,
// and hand the rest to New.
//
// The SQL is written in the dialect both engines understand where one
// exists (WITH RECURSIVE, ON CONFLICT ... excluded, RETURNING, concat,
// octet_length), with SQLite's `?` placeholders and `json_each(?)` for a
// list of ids; a Dialect's Rebind turns that into its own once per query.
//
// Each Update runs in its own savepoint inside the batch's transaction, so
// a failing Update undoes only its own writes, and every caller is answered
// only after the shared commit is durable. Updates are strictly serialised
// across every handle on the database: the transaction takes the database's
// write lock first (SQLite's BEGIN IMMEDIATE, PostgreSQL's advisory lock),
// which is what makes the governor's checks atomic with the writes they
// guard, and nothing kept in memory decides a write without being checked
// inside the transaction (the log's edge, see edge).
package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/kin-agents/kin/internal/auditlog"
	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/internal/store/inmem"
)

// maxBatch bounds how many Updates one commit carries.
const maxBatch = 256

// Dialect is how one database's SQL and transactions differ from what the
// queries are written in.
type Dialect struct {
	// Name prefixes the errors the driver reports ("sqlite", "postgres").
	Name string
	// Rebind turns a query written with `?` (and `?N`) placeholders into
	// the database's own; nil leaves it as written. It is called once per
	// distinct query and must be a pure function of it.
	Rebind func(q string) string
	// Begin starts a batch's write transaction on the writer's connection,
	// holding the database's write lock until it ends. lazy: every Update
	// in the batch is lazy (UpdateLazy), so it may commit without waiting
	// for the disk.
	Begin func(ctx context.Context, w *sql.DB, lazy bool) (*sql.Tx, error)
	// Sync, when set, makes every commit so far as durable as a batch that
	// Begin began not lazy: a batch of early Updates (UpdateEarlyDeferrable)
	// begins lazy, is answered once committed, and is synced after. Nil:
	// early Updates are durable when answered, as Updates are.
	Sync func() error
	// BeforeCommit, when set, runs in a batch's transaction before COMMIT
	// when the batch appended events, the log's size being size: where a
	// notification must be part of the commit (PostgreSQL's NOTIFY).
	BeforeCommit func(ctx context.Context, tx *sql.Tx, size int64) error
	// Lost, when set, reports whether err says the connection was lost
	// before the statement did anything (a server restart, a failover): a
	// read outside a transaction that failed so is run once more, on
	// another connection of the pool.
	Lost func(err error) bool
	// InsertEvents, when set, inserts a batch's events at once, before its
	// commit, instead of one statement per event: where each statement
	// costs a round trip to a server (PostgreSQL). Nothing in a write
	// transaction reads events back, so holding them to the end changes
	// nothing an Update sees. size is the log's size with them: InsertEvents
	// also does BeforeCommit's part, in the same statement (BeforeCommit is
	// then not called).
	InsertEvents func(ctx context.Context, tx *sql.Tx, rows []EventRow, size int64) error
	// EventRowsPerInsert, when not 0 and InsertEvents is nil, holds a
	// batch's events to its end as InsertEvents does, and inserts them
	// there in multi-row INSERTs of this many rows, then of an eighth as
	// many, and so on down to one row (eventInserts; each prepared on the
	// writer's connection with WriterStatements): where every statement
	// costs a pass of its own through database/sql and the driver
	// (SQLite: an INSERT per event was about half of a 1,000-agent
	// cascade's record). The rows go in seq order, as EventAppend gave
	// them their seqs and hashes.
	EventRowsPerInsert int
	// WriterStatements prepares the hot statements on the writer's
	// connection at New (SQLite compiles a statement on every call
	// otherwise; pgx caches statements itself).
	WriterStatements bool
	// InsertRowID says the driver's result of an INSERT reports the new
	// row's id (SQLite's rowid), so an agent's insert needs no RETURNING:
	// with it, SQLite runs the insert to the end, keeps the returned row
	// aside and hands it over as a query's, which cost more than the
	// insert itself (20,000 inserts in one transaction, under load:
	// 121-135 µs an insert with RETURNING, 48-65 µs without).
	InsertRowID bool
	// CachesStatements says the database/sql driver keeps its own cache of
	// prepared statements per connection (pgx: a query's first run parses
	// it, later runs only bind and execute), so a write transaction
	// prepares nothing of its own: preparing a query on the transaction
	// and closing it at the commit would cost two more round trips per
	// distinct query per batch.
	CachesStatements bool
	// ChainSavepoints releases each Update's savepoint together with
	// the next Update's SAVEPOINT, in one statement string ("RELEASE
	// SAVEPOINT u; SAVEPOINT u"), and the last one with the COMMIT,
	// rather than on its own: one round trip fewer per Update where a
	// round trip is a trip to a server (PostgreSQL's simple query runs
	// both, and stops at the first that fails). What commits is the same.
	ChainSavepoints bool
	// HoldInserts: in an Update made with UpdateDeferrable, the writes
	// whose result is not read are handed to the writer's connection to
	// hold and send with the next statement (held.go's execHeld):
	// AgentInsert (which then assigns the agent's id, the batch's largest
	// plus one), SpendAdd, SpendSpawnAdd and, with Lateral, a remembered
	// permission chain's check (speculate.go). For where each statement is
	// a round trip to a server (PostgreSQL). The writer's connection must hold a statement whose
	// context carries a Held (HoldOf), report its outcome (Held.Ran),
	// send what it holds at FlushSQL, and refuse a ROLLBACK TO after a
	// held write failed unless the writer is Recovering.
	HoldInserts bool
	// CommitInTx ends a batch by running CommitSQL in its transaction, the
	// batch's events' insert (and a notification) held for it (Ahead), so
	// that what is held, the events and the COMMIT take one round trip
	// where each statement is a trip to a server (PostgreSQL). The
	// driver's COMMIT must not run should anything sent with it fail, and
	// the statement must then fail (a held write's failure reported on its
	// Held, as for any statement that carries it); Tx.Commit after it
	// only ends the transaction. Begin may likewise hold the BEGIN and the
	// lock for the batch's first read: should that read fail for a lost
	// connection (Lost), the batch, which has written nothing yet, begins
	// once more.
	CommitInTx bool
	// Lateral runs the walks over the agents (chains, subtrees, lists of
	// ids) in their LATERAL forms (lateral.go): where the engine keeps a
	// statement's plan made while the tables were small (PostgreSQL).
	Lateral bool
	// BulkReadOn and BulkReadOff, when set, are run on a read connection
	// taken for one chunk of a large read (parallelReadMin agents or
	// more, outside a transaction), before its statement and once its rows
	// were read: where the engine reads large runs of pages cheaper in
	// another mode that should not stay on (SQLite's mmap_size, which
	// sqlite.go explains). A connection whose BulkReadOff failed is
	// closed, not given back to the pool.
	BulkReadOn, BulkReadOff string

	rebound sync.Map // query → Rebind(query)
}

// holdsEvents: a batch's events are inserted at its end (InsertEvents,
// EventRowsPerInsert), not by EventAppend.
func (d *Dialect) holdsEvents() bool {
	return d.InsertEvents != nil || d.EventRowsPerInsert > 0
}

// lost is Lost(err), false without one.
func (d *Dialect) lost(err error) bool {
	return err != nil && d != nil && d.Lost != nil && d.Lost(err)
}

// rebind is Rebind(q) of q's form on this engine (Lateral), computed
// once per query.
func (d *Dialect) rebind(q string) string {
	if d == nil || (d.Rebind == nil && !d.Lateral) {
		return q
	}
	if v, ok := d.rebound.Load(q); ok {
		return v.(string)
	}
	form := q
	if l, ok := lateralForms[q]; ok && d.Lateral {
		form = l
	}
	if d.Rebind != nil {
		form = d.Rebind(form)
	}
	v, _ := d.rebound.LoadOrStore(q, form)
	return v.(string)
}

// Config is what a driver hands New.
type Config struct {
	Dialect *Dialect
	// Writer is the writer's pool, of exactly one connection.
	Writer *sql.DB
	// Readers is the pool reads outside Updates use.
	Readers *sql.DB
	// Unhashed appends events without their tree hashes: only benchmarks
	// set it, to measure what hashing costs.
	Unhashed bool
	// Cold keeps the row cache (OnlyWriter's) from being warmed
	// (rowwarm.go): only tests set it, to see what reads alone put there.
	Cold bool
	// OnlyWriter says this handle's writer is the database's only writer
	// while the store is open: the store then keeps the rows large reads by
	// id read (rowcache.go), learning of changes from its own commits, and
	// knows the log's size without reading it (LogSize).
	OnlyWriter bool
}

// Store is the shared part of a SQL store: a driver embeds it and adds
// Driver, Wait's polling or listening for other handles, and Close.
type Store struct {
	reader
	d       *Dialect
	wstmts  *stmts
	inserts []eventInsert // the INSERTs of held events (EventRowsPerInsert), most rows first
	wdb     *sql.DB
	rdb     *sql.DB
	queue   chan *update
	stop    chan struct{}
	wg      sync.WaitGroup
	closed  sync.Once
	closeMu sync.RWMutex // guards done against Update racing Close
	done    bool

	unhashed bool
	only     bool              // the only writer, hashing: log is the committed edge (LogSize)
	logMu    sync.Mutex        // guards log
	log      auditlog.Frontier // a cache of the committed tree's edge, checked in every write transaction; setLog only moves it forward

	warm       *rowWarmer         // nil without a row cache (rowwarm.go)
	warmCancel context.CancelFunc // ends the warmer's read at Close

	hub      *inmem.Hub   // wakes this handle's waiters
	notified atomic.Int64 // the largest log size waiters were woken for

	hereMu sync.Mutex
	here   []seqRange // the seqs this handle's commits appended, oldest first (AppendedHere)
	// ownFrom, ownSize and ownTypes are the log size before and after the
	// commit the writer is making and its event types (committing), 0, 0
	// and nil between commits.
	ownMu    sync.Mutex
	ownFrom  int64
	ownSize  int64
	ownTypes []string
}

// seqRange is the events (from, to] by seq.
type seqRange struct{ from, to int64 }

// maxHere bounds the ranges AppendedHere remembers: one per run of this
// handle's commits not interleaved with another handle's (a daemon alone
// on its store needs one).
const maxHere = 256

type update struct {
	ctx  context.Context
	fn   func(store.Tx) error
	err  chan error
	lazy bool // UpdateLazy's: its batch need not reach the disk before it returns
	// durable, for UpdateEarlyDeferrable's, is answered once its commit is
	// on the disk (after err, which answers once it is visible).
	durable chan error
	// deferrable: UpdateDeferrable's, whose fn may run more than once
	// (held.go)
	deferrable bool
}

// New starts the writer on a migrated database. On an error the caller
// still owns (and closes) cfg's pools.
func New(ctx context.Context, cfg Config) (*Store, error) {
	d := cfg.Dialect
	tree, err := loadLog(ctx, reader{q: cfg.Writer, d: d})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", d.Name, err)
	}
	wstmts := newStmts(cfg.Writer, d, false)
	var inserts []eventInsert
	if d.InsertEvents == nil && d.EventRowsPerInsert > 0 {
		inserts = eventInserts(d.EventRowsPerInsert)
	}
	if d.WriterStatements {
		qs := writerStatements()
		for _, in := range inserts {
			if in.rows > 1 { // the one-row INSERT is among the hot statements
				qs = append(qs, in.sql)
			}
		}
		if err := wstmts.prepare(ctx, qs); err != nil {
			wstmts.close()
			return nil, fmt.Errorf("%s: prepare: %w", d.Name, err)
		}
	}
	var rc *rowCache
	if cfg.OnlyWriter {
		rc = newRowCache(rowCacheBytes)
		if !d.HoldInserts {
			wstmts.perm = newPermMemo()
		}
	}
	s := &Store{
		reader:   reader{q: cfg.Readers, d: d, st: newStmts(cfg.Readers, d, true), rc: rc},
		d:        d,
		wstmts:   wstmts,
		inserts:  inserts,
		wdb:      cfg.Writer,
		rdb:      cfg.Readers,
		queue:    make(chan *update, maxBatch),
		stop:     make(chan struct{}),
		unhashed: cfg.Unhashed,
		only:     cfg.OnlyWriter && !cfg.Unhashed,
		log:      tree,
		hub:      inmem.NewHub(),
	}
	s.notified.Store(tree.Size())
	var warmCtx context.Context
	if rc != nil && !cfg.Cold {
		// Before the writer starts: its commits queue what they wrote.
		warmCtx, s.warmCancel = context.WithCancel(context.Background())
		s.warm = newRowWarmer()
	}
	s.wg.Add(1)
	go s.writeLoop()
	if s.warm != nil {
		s.wg.Add(1)
		go s.warmLoop(warmCtx)
	}
	return s, nil
}

// Wait returns a channel closed at the next commit that appended events:
// this handle's at once, other handles' as the driver learns of them
// (Woken).
func (s *Store) Wait() <-chan struct{} { return s.hub.Wait() }

// Subscribe returns a wait that this handle's commits wake only when they
// appended an event of one of types (except: of a type not among them);
// other handles' commits wake it always (store.Subscriber).
func (s *Store) Subscribe(types []string, except bool) func() <-chan struct{} {
	return s.hub.Subscribe(types, except).Wait
}

// Hub is the waiters' hub, for a driver that watches other handles only
// while someone waits.
func (s *Store) Hub() *inmem.Hub { return s.hub }

// Woken wakes the waiters if the log's size n is past what they were last
// woken for: a driver calls it when it learns of another handle's commit.
// A notification of this handle's own commit (PostgreSQL's comes back to
// its listener, at times before the writer has woken the waiters itself)
// wakes by that commit's event types, as the writer does. (Should that
// commit fail and another handle commit the same size before the writer
// forgets it, that one's notification wakes by the failed commit's types
// too: a subscription to none of them would then wake at the next commit,
// or its own poll.)
func (s *Store) Woken(n int64) {
	s.ownMu.Lock()
	from, own, types := s.ownFrom, s.ownSize, s.ownTypes
	s.ownMu.Unlock()
	if own != 0 && n == own {
		s.wakeFor(from, n, types)
		return
	}
	if storeMax(&s.notified, n) {
		s.hub.Notify()
	}
}

// committing records the log size and event types of the commit the
// writer is making (0, nil once its waiters were woken, or it failed), for
// Woken.
func (s *Store) committing(from, size int64, types []string) {
	s.ownMu.Lock()
	s.ownFrom, s.ownSize, s.ownTypes = from, size, types
	s.ownMu.Unlock()
}

// wakeFor wakes the waiters for the commit that brought the log from
// from to size, once notified is past it: by this handle's event types
// only where every event up to from was announced already; where another
// handle's events lie between what was announced and from (committed
// before this commit, their notifications not yet here), every waiter,
// since those notifications, coming later with sizes below size, wake
// nobody. (A follower on one host had missed another host's revocation
// for its 5 s poll: its own commit of a refused token, right after, woke
// only those who wait for that type.)
func (s *Store) wakeFor(from, size int64, types []string) {
	prev := s.notified.Load()
	if !storeMax(&s.notified, size) {
		return
	}
	if from > prev {
		s.hub.Notify()
		return
	}
	s.hub.NotifyTypes(types)
}

// Close stops the writer after the Updates already queued and closes both
// pools. It is safe to call more than once.
func (s *Store) Close() error {
	var err error
	s.closed.Do(func() {
		s.closeMu.Lock()
		s.done = true
		s.closeMu.Unlock()
		close(s.stop)
		if s.warmCancel != nil {
			s.warmCancel()
		}
		s.wg.Wait()
		err = errors.Join(s.reader.st.close(), s.wstmts.close(), s.rdb.Close(), s.wdb.Close())
	})
	return err
}

// Update queues fn for the writer and waits for its durable result.
func (s *Store) Update(ctx context.Context, fn func(store.Tx) error) error {
	return s.update(ctx, &update{fn: fn})
}

// UpdateDeferrable is Update for a re-runnable fn (store.Deferrer): where
// the database is a server (Dialect.HoldInserts), its agent insert is sent
// with the next statement rather than on its own (held.go).
func (s *Store) UpdateDeferrable(ctx context.Context, fn func(store.Tx) error) error {
	return s.update(ctx, &update{fn: fn, deferrable: true})
}

// UpdateLazyDeferrable is UpdateLazy for a re-runnable fn
// (store.LazyDeferrer): both UpdateLazy's durability and UpdateDeferrable's
// held writes.
func (s *Store) UpdateLazyDeferrable(ctx context.Context, fn func(store.Tx) error) error {
	return s.update(ctx, &update{fn: fn, lazy: true, deferrable: true})
}

// UpdateEarlyDeferrable is UpdateDeferrable, except that, where the
// dialect can sync commits apart (Dialect.Sync), it returns once fn's
// writes are committed and visible, and durable waits until they are on
// the disk (store.EarlyDeferrer). A batch of early and lazy Updates alone
// commits without waiting for the disk, is answered, then synced.
func (s *Store) UpdateEarlyDeferrable(ctx context.Context, fn func(store.Tx) error) (durable func() error, err error) {
	u := &update{fn: fn, deferrable: true, durable: make(chan error, 1)}
	if err := s.update(ctx, u); err != nil {
		return nil, err
	}
	return sync.OnceValue(func() error { return <-u.durable }), nil
}

// UpdateLazy is Update, except that a batch of lazy Updates alone commits
// without waiting for the disk (Dialect.Begin's lazy): committed, visible
// and safe from a crash of the process when it returns, on the disk with
// the next durable commit (both engines' logs are appended in order, so
// that commit's flush covers it). A batch that also holds an Update is
// durable as a whole.
func (s *Store) UpdateLazy(ctx context.Context, fn func(store.Tx) error) error {
	return s.update(ctx, &update{fn: fn, lazy: true})
}

func (s *Store) update(ctx context.Context, u *update) error {
	u.ctx, u.err = ctx, make(chan error, 1)
	s.closeMu.RLock()
	if s.done {
		s.closeMu.RUnlock()
		return store.ErrClosed
	}
	select {
	case s.queue <- u:
		s.closeMu.RUnlock()
	case <-ctx.Done():
		s.closeMu.RUnlock()
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
	// early: the batch holds early Updates and commits as if lazy, to be
	// synced once they are answered.
	lazy, early := true, false
	for _, u := range batch {
		switch {
		case u.durable != nil && s.d.Sync != nil:
			early = true
		case !u.lazy:
			lazy = false
		}
	}
	early = early && lazy
	answer := func() {
		synced := false
		for i, u := range batch {
			u.err <- errs[i]
			synced = synced || early && u.durable != nil && errs[i] == nil
		}
		var err error
		if synced {
			if err = s.d.Sync(); err != nil {
				err = fmt.Errorf("%s: sync: %w", s.d.Name, err)
			}
		}
		for _, u := range batch {
			if u.durable != nil {
				u.durable <- err // nil where the commit was durable (or failed: err answered it)
			}
		}
	}
	failAll := func(err error) {
		for i := range errs {
			errs[i] = err
		}
		answer()
	}
	ctx := context.Background()
	var (
		tx   *sql.Tx
		w    reader
		tree auditlog.Frontier
		top  int64
		size int64 // the log's size: the tree's, or counted here when unhashed
	)
	for attempt := 0; ; attempt++ {
		var err error
		tx, err = s.d.Begin(ctx, s.wdb, lazy)
		if err != nil {
			failAll(fmt.Errorf("%s: begin: %w", s.d.Name, err))
			return
		}
		var local map[string]*sql.Stmt // closed with the transaction
		if !s.d.CachesStatements {
			local = map[string]*sql.Stmt{}
		}
		w = reader{q: tx, d: s.d, tx: tx, st: s.wstmts, local: local}
		// The batch's tree: the cached edge, checked against the stored
		// log under the write lock (another handle may have appended).
		// s.log changes only once the batch commits.
		tree, top, err = s.edge(ctx, w)
		if err == nil {
			size = tree.Size()
			if s.unhashed { // benchmarks only: the tree does not advance
				size, top, err = logSizeTop(ctx, w, s.d.HoldInserts)
			}
		}
		if err == nil {
			break
		}
		tx.Rollback()
		if attempt == 0 && s.d.lost(err) {
			// The BEGIN went with this first read (Dialect.CommitInTx)
			// and the connection had ended: nothing was written, begin
			// again, on a new connection.
			continue
		}
		failAll(fmt.Errorf("%s: event log: %w", s.d.Name, err))
		return
	}
	cache := &batchCache{track: s.rc != nil}
	// marked: the row cache was told of the batch's writes (committing),
	// and must be told the COMMIT returned (committed) on every way out.
	marked := false
	defer func() {
		if marked {
			s.rc.committed(cache.wrote)
		}
	}()
	// The batch as it was before each Update, for undoing it.
	type mark struct {
		tree   auditlog.Frontier
		size   int64
		events int
		top    int64
	}
	marks := make([]mark, len(batch))
	appended := make([]int, len(batch))     // events each Update appended
	typesOf := make([][]string, len(batch)) // their types
	now := func() mark { return mark{tree, size, len(cache.events), top} }
	restore := func(m mark) {
		tree, size, top = m.tree, m.size, m.top
		cache.events = cache.events[:m.events] // its events go with its writes
		cache.forget()                         // what it read may include its undone writes
		s.wstmts.forgetPerm()                  // as what the writer's memory learnt from them
	}
	var held heldWrites                // held writes not yet confirmed (held.go)
	noHold := make([]bool, len(batch)) // run again with its writes done at once
	// failBatch answers every Update that has no error of its own with err:
	// the transaction is in an unknown state.
	failBatch := func(err error, also int) {
		tx.Rollback()
		s.wstmts.forgetPerm()
		for j := range errs {
			if errs[j] == nil || j == also {
				errs[j] = err
			}
		}
		answer()
	}
	// redo answers a held write's failure (held.go): back to the
	// savepoint of the Update k that wrote it, to run k again, its
	// writes done at once, and the Updates after it. False: the batch
	// failed and was answered.
	redo := func(k int) bool {
		if _, err := w.exec(Recover(ctx), RollbackToSQL); err != nil {
			failBatch(fmt.Errorf("%s: rollback to savepoint after a held write failed: %w", s.d.Name, err), -1)
			return false
		}
		restore(marks[k])
		held = held[:0]
		noHold[k] = true
		for j := k; j < len(batch); j++ {
			errs[j], appended[j], typesOf[j] = nil, 0, nil
		}
		return true
	}
	// pending: an earlier Update's savepoint is still to be released
	// (Dialect.ChainSavepoints: the next SAVEPOINT, or the COMMIT,
	// releases it).
	pending := false
	// alone: an Update alone in its batch, where no write is held, runs
	// without a savepoint: should it fail, the batch has nothing to keep
	// and its transaction is rolled back whole (ok == 0 below). Two
	// statements fewer for each Update that comes alone (on SQLite, the
	// model gateway's metering of calls that end apart).
	alone := len(batch) == 1 && !s.d.HoldInserts
	i := 0
run:
	for ; i < len(batch); i++ {
		u := batch[i]
		if err := u.ctx.Err(); err != nil {
			errs[i] = err
			continue
		}
		if !alone {
			q := SavepointSQL
			if pending {
				q = ReleaseSavepointSQL
			}
			if _, err := w.exec(ctx, q); err != nil {
				// A failed RELEASE leaves the transaction failed: its
				// COMMIT fails, and so every Update of the batch.
				errs[i] = fmt.Errorf("%s: savepoint: %w", s.d.Name, err)
				if k, failed := held.failed(); failed {
					if !redo(k) {
						return
					}
					pending, i = true, k-1
				}
				continue
			}
		}
		pending = false
		hold := s.d.HoldInserts && u.deferrable && !noHold[i]
		if !hold && len(held) > 0 {
			// Only a re-runnable Update runs while a held write is
			// unanswered: send it now (with the savepoint above).
			_, err := w.exec(ctx, FlushSQL)
			if k, failed := held.failed(); failed {
				if !redo(k) {
					return
				}
				pending, i = true, k-1
				continue
			}
			if err != nil {
				failBatch(fmt.Errorf("%s: flush held writes: %w", s.d.Name, err), -1)
				return
			}
		}
		marks[i] = now()
		t := &txn{reader: w, log: &tree, size: &size, unhashed: s.unhashed, batch: cache, update: i}
		if s.d.HoldInserts {
			t.top = &top
			if hold {
				t.held = &held
			}
		}
		errs[i] = runUpdate(u, t)
		if k, failed := held.failed(); failed {
			// Its statements, or an earlier Update's held write, failed
			// for the held write: what it returned is void.
			if !redo(k) {
				return
			}
			pending, i = true, k-1
			continue
		}
		if errs[i] != nil {
			restore(marks[i])
			if alone {
				continue // rolled back with the transaction
			}
			if _, err := w.exec(ctx, RollbackToSQL); err != nil {
				if k, failed := held.failed(); failed {
					// Sent ahead of the ROLLBACK TO, an earlier held
					// write failed: the ROLLBACK TO was not sent.
					if !redo(k) {
						return
					}
					pending, i = true, k-1
					continue
				}
				// The transaction is in an unknown state: fail the batch.
				failBatch(fmt.Errorf("%s: rollback to savepoint: %w", s.d.Name, err), i)
				return
			}
		} else {
			appended[i], typesOf[i] = t.appended, t.types
		}
		switch {
		case alone: // no savepoint to release
		case s.d.ChainSavepoints:
			pending = true
		default:
			if _, err := w.exec(ctx, ReleaseSQL); err != nil {
				// Reported failed, so undone: its writes must not commit
				// with the batch's (a registration answered "failed"
				// whose agent exists). Its savepoint is still open.
				errs[i] = fmt.Errorf("%s: release savepoint: %w", s.d.Name, err)
				restore(marks[i])
				if _, err := w.exec(ctx, RollbackToSQL); err != nil {
					failBatch(fmt.Errorf("%s: rollback to savepoint after a failed release: %w", s.d.Name, err), i)
					return
				}
				if _, err := w.exec(ctx, ReleaseSQL); err != nil {
					failBatch(fmt.Errorf("%s: release savepoint after rolling back to it: %w", s.d.Name, err), i)
					return
				}
			}
		}
	}
	ok, total := 0, 0
	var types []string // of the events appended
	for j := range batch {
		if errs[j] == nil {
			ok++
			total += appended[j]
			types = append(types, typesOf[j]...)
		}
	}
	if ok > 0 && len(cache.wrote) > 0 {
		s.rc.committing(cache.wrote) // again after a redo: the ids so far
		marked = true
	}
	var err error
	switch {
	case ok == 0:
		err = tx.Rollback() // each Update undone forgot what the writer learnt (restore)
	case s.d.CommitInTx:
		// The held writes, the events (and their notification) and the
		// COMMIT in one round trip: should anything before the COMMIT
		// fail, it is not run.
		ahead := Ahead(ctx)
		if len(cache.events) > 0 {
			err = s.d.InsertEvents(ahead, tx, cache.events, size)
		} else if total > 0 && s.d.BeforeCommit != nil {
			err = s.d.BeforeCommit(ahead, tx, size)
		}
		if err == nil {
			if total > 0 {
				s.committing(size-int64(total), size, types)
			}
			_, err = w.exec(ctx, CommitSQL)
		}
		if k, failed := held.failed(); failed {
			// A held write went with the COMMIT and failed, so the
			// COMMIT was not run: run its Update again, and on. What
			// committing said of it is forgotten (a notification of
			// another handle's commit at that size would wake by this
			// batch's types).
			s.committing(0, 0, nil)
			if !redo(k) {
				return
			}
			// err was the failed write's: the batch goes on from k.
			pending, i, err = true, k, nil
			goto run
		}
		// (The driver sends every held write with the COMMIT: none is
		// left unconfirmed once it ran.)
		if err != nil {
			// Not committed, or (the connection lost under the COMMIT)
			// not known to be: reported as failed, as a COMMIT's error is.
			tx.Rollback()
			err = fmt.Errorf("events or commit: %w", err)
		} else {
			err = tx.Commit() // ends what the server committed
		}
	default:
		inserted := len(cache.events) > 0
		if inserted {
			if s.d.InsertEvents != nil {
				err = s.d.InsertEvents(ctx, tx, cache.events, size)
			} else {
				err = w.insertEvents(ctx, s.inserts, cache.events)
			}
			if err != nil {
				err = fmt.Errorf("insert events: %w", err)
			}
		} else if len(held) > 0 {
			if _, err = w.exec(ctx, FlushSQL); err != nil {
				err = fmt.Errorf("flush held writes: %w", err)
			}
		}
		if k, failed := held.failed(); failed {
			// The last held writes went with the events (or the
			// flush), and one failed: run its Update again, and on.
			if !redo(k) {
				return
			}
			// The flush's error was the failed write's: the batch
			// goes on from k.
			pending, i, err = true, k, nil
			goto run
		}
		if err == nil && len(held) > 0 {
			err = errors.New("held writes were not sent before the commit")
		}
		if err == nil && total > 0 && (!inserted || s.d.InsertEvents == nil) && s.d.BeforeCommit != nil {
			err = s.d.BeforeCommit(ctx, tx, size)
		}
		if err != nil {
			tx.Rollback()
		} else {
			if total > 0 {
				s.committing(size-int64(total), size, types)
			}
			err = tx.Commit()
		}
	}
	if marked {
		// Before anyone learns of the commit (its waiters, its callers).
		s.rc.committed(cache.wrote)
		marked = false
	}
	if err != nil {
		s.wstmts.forgetPerm() // the batch's writes are not the database's
		for i := range errs {
			if errs[i] == nil {
				errs[i] = fmt.Errorf("%s: commit: %w", s.d.Name, err)
			}
		}
	} else if ok > 0 {
		if s.warm != nil {
			s.warm.add(cache.wrote)
			s.warm.add(cache.inserted)
		}
		s.setLog(tree)
		if total > 0 {
			s.appendedHere(size-int64(total), size)
		}
		if total > 0 {
			s.wakeFor(size-int64(total), size, types)
		}
	}
	if total > 0 {
		// Forgotten only once the waiters were woken for it (notified is
		// past it): a notification of it that came before still wakes by
		// its types, and one after wakes nobody.
		s.committing(0, 0, nil)
	}
	answer()
}

// appendedHere records that this handle's commit appended the events
// (from, to], before its waiters are woken.
func (s *Store) appendedHere(from, to int64) {
	s.hereMu.Lock()
	defer s.hereMu.Unlock()
	if n := len(s.here); n > 0 && s.here[n-1].to == from {
		s.here[n-1].to = to // no other handle's commit in between
		return
	}
	if len(s.here) == maxHere {
		s.here = append(s.here[:0], s.here[1:]...)
	}
	s.here = append(s.here, seqRange{from, to})
}

// AppendedHere reports whether this handle's commits appended the event
// seq (store.AppendedHere), as far as it remembers.
func (s *Store) AppendedHere(seq int64) bool {
	s.hereMu.Lock()
	defer s.hereMu.Unlock()
	for i := len(s.here) - 1; i >= 0; i-- {
		if r := s.here[i]; seq > r.from && seq <= r.to {
			return true
		}
	}
	return false
}

// The savepoint each Update runs in: the same SQL on both engines,
// prepared on the writer's connection like the hot statements. Exported
// for a driver that treats them apart (PostgreSQL's pipeline.go).
const (
	SavepointSQL  = "SAVEPOINT u"
	RollbackToSQL = "ROLLBACK TO SAVEPOINT u"
	ReleaseSQL    = "RELEASE SAVEPOINT u"
	// ReleaseSavepointSQL releases the previous Update's savepoint and
	// starts the next one's in one round trip (Dialect.ChainSavepoints).
	ReleaseSavepointSQL = ReleaseSQL + "; " + SavepointSQL
)

// edge returns the tree's committed edge as the transaction r sees it: the
// cache when the stored log has its size (one indexed read), else reloaded
// from the stored hashes, as New does. Inside the write transaction no
// other handle can append until the commit, so the seqs and hashes the
// batch appends continue the stored log, whoever wrote it last.
//
// With Dialect.HoldInserts it also returns the largest agent id, read in
// the same statement (held.go); 0 otherwise.
func (s *Store) edge(ctx context.Context, r reader) (auditlog.Frontier, int64, error) {
	s.logMu.Lock()
	f := s.log
	s.logMu.Unlock()
	if s.unhashed {
		return f, 0, nil // benchmarks only: no hashes to continue, seqs from the database
	}
	n, top, err := logSizeTop(ctx, r, s.d.HoldInserts)
	if err != nil || n == f.Size() {
		return f, top, err
	}
	if f, err = loadFrontier(ctx, r, n); err == nil {
		s.setLog(f) // others' commits, read before this batch wrote anything
	}
	return f, top, err
}

func runUpdate(u *update, tx *txn) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("store: update panicked: %v", r)
		}
	}()
	return u.fn(tx)
}

// storeMax raises v to n and reports whether it did.
func storeMax(v *atomic.Int64, n int64) bool {
	for {
		old := v.Load()
		if n <= old {
			return false
		}
		if v.CompareAndSwap(old, n) {
			return true
		}
	}
}

// Queued is how many Updates wait for the writer: for tests that hold the
// writer while others queue.
func (s *Store) Queued() int { return len(s.queue) }

// KeepsRows reports whether the store keeps the rows of large reads between
// reads (Config.OnlyWriter).
func (s *Store) KeepsRows() bool { return s.rc != nil }
