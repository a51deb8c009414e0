package sqlstore

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/kin-agents/kin/internal/auditlog"
	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/kin"
)

// The verifiable event log. Every event is a leaf of a Merkle tree
// (internal/auditlog): EventAppend stores, with the event, its leaf's stored
// form (auditlog.StoredForm: a fingerprint of the leaf hash and the large
// subtrees it completes) in the event's own row (column hashes), so the
// event and its hashes are one write. The writer keeps the tree's right
// edge (a Frontier) in memory, per batch and per savepoint, so appending
// reads nothing back; a rolled-back Update rolls its part of the tree back
// too. The edge is a cache: each batch's transaction first reads the log's
// size (Store.edge) and reloads the edge if another handle on the file
// appended since.

const sqlEventHashes = `SELECT hashes FROM events WHERE seq = ?`

// EventRow is an event as its row holds it, held to the batch's end
// (Dialect.InsertEvents, EventRowsPerInsert).
type EventRow struct {
	Seq, Time     int64
	Type          string
	Agent, Parent int64
	Data          string
	Hashes        []byte
}

// eventInsert is an INSERT of rows events (Dialect.EventRowsPerInsert).
type eventInsert struct {
	rows int
	sql  string
}

// eventInserts are the INSERTs of n rows, n/8 rows, and so on, and of one.
func eventInserts(n int) []eventInsert {
	var out []eventInsert
	for ; n > 1; n /= 8 {
		var b strings.Builder
		b.WriteString(`INSERT INTO events (seq, time, type, agent_id, parent_id, data, hashes) VALUES `)
		for i := range n {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString("(?, ?, ?, ?, ?, ?, ?)")
		}
		out = append(out, eventInsert{n, b.String()})
	}
	return append(out, eventInsert{1, sqlEventAppend})
}

// insertEvents inserts a batch's held events, in order, with the fewest
// of inserts' statements (Dialect.EventRowsPerInsert).
func (r reader) insertEvents(ctx context.Context, inserts []eventInsert, rows []EventRow) error {
	args := make([]any, 0, 7*min(len(rows), inserts[0].rows))
	for _, in := range inserts {
		if len(rows) < in.rows {
			continue
		}
		st := r.stmt(ctx, in.sql) // once per batch, not per statement
		for len(rows) >= in.rows {
			args = args[:0]
			for _, e := range rows[:in.rows] {
				var hashes any // NULL when unhashed, as EventAppend's
				if e.Hashes != nil {
					hashes = e.Hashes
				}
				args = append(args, e.Seq, e.Time, e.Type, e.Agent, e.Parent, e.Data, hashes)
			}
			var err error
			if st != nil {
				_, err = st.ExecContext(ctx, args...)
			} else {
				_, err = r.q.ExecContext(ctx, r.d.rebind(in.sql), args...)
			}
			if err != nil {
				return interpretError(err)
			}
			rows = rows[in.rows:]
		}
	}
	return nil
}

// EventAppend stores e as the next event, with the tree hashes of its leaf.
// Its seq is the tree's size plus one: leaf index seq-1.
func (t *txn) EventAppend(ctx context.Context, e kin.Event) (kin.Event, error) {
	if bytes.IndexByte(e.Data, '\n') >= 0 {
		return e, fmt.Errorf("store: event %s: data must be compact JSON, without newlines", e.Type)
	}
	e.Time = time.Unix(0, e.Time.UnixNano()).UTC()
	if t.unhashed {
		// The floor of an append: the same row with its seq and no
		// hashes (NULL), the seq counted as the tree counts it.
		e.Seq = *t.size + 1
		if t.d.holdsEvents() && t.batch != nil { // as the hashed path inserts them
			t.batch.events = append(t.batch.events, EventRow{Seq: e.Seq, Time: e.Time.UnixNano(), Type: e.Type,
				Agent: int64(e.Agent), Parent: int64(e.Parent), Data: string(e.Data)})
			*t.size = e.Seq
			t.appended++
			t.types = append(t.types, e.Type)
			return e, nil
		}
		if _, err := t.exec(ctx, sqlEventAppend, e.Seq, e.Time.UnixNano(), e.Type, e.Agent, e.Parent, string(e.Data), nil); err != nil {
			return e, interpretError(err)
		}
		*t.size = e.Seq
		t.appended++
		t.types = append(t.types, e.Type)
		return e, nil
	}
	e.Seq = t.log.Size() + 1
	t.leaf = auditlog.AppendLeaf(append(t.leaf[:0], 0), e) // 0x00 || leaf: RFC 6962's leaf hash input
	var undo auditlog.Undo
	t.hashes, undo = t.log.AppendTo(t.hashes[:0], auditlog.HashLeaf(t.leaf))
	t.blob = auditlog.StoredForm(t.blob[:0], t.hashes)
	if t.d.holdsEvents() && t.batch != nil {
		// Inserted with the batch's other events before its commit.
		t.batch.events = append(t.batch.events, EventRow{Seq: e.Seq, Time: e.Time.UnixNano(), Type: e.Type,
			Agent: int64(e.Agent), Parent: int64(e.Parent), Data: string(e.Data), Hashes: bytes.Clone(t.blob)})
		*t.size = e.Seq
		t.appended++
		t.types = append(t.types, e.Type)
		return e, nil
	}
	if _, err := t.exec(ctx, sqlEventAppend, e.Seq, e.Time.UnixNano(), e.Type, e.Agent, e.Parent, string(e.Data), t.blob); err != nil {
		t.log.Revert(undo) // the tree advances only with the row
		return e, interpretError(err)
	}
	*t.size = e.Seq
	t.appended++
	t.types = append(t.types, e.Type)
	return e, nil
}

func (t *txn) LogCheckpointInsert(ctx context.Context, c auditlog.StoredCheckpoint) error {
	_, err := t.exec(ctx, `INSERT INTO log_checkpoints (size, time, note) VALUES (?, ?, ?) ON CONFLICT (size) DO NOTHING`,
		c.Size, c.Time.UnixNano(), string(c.Note))
	return interpretError(err)
}

// LogHead is the committed tree: its size and root hash. The size is read
// from the database, so it counts what other handles on the file appended
// too; the edge is the cached one when that is as large, else reloaded.
func (s *Store) LogHead(ctx context.Context) (int64, tlog.Hash, error) {
	n, err := s.LogSize(ctx)
	if err != nil {
		return 0, tlog.Hash{}, err
	}
	s.logMu.Lock()
	f := s.log
	s.logMu.Unlock()
	if f.Size() < n {
		// Another handle appended: the cache is behind.
		if f, err = loadFrontier(ctx, s.reader, n); err != nil {
			return 0, tlog.Hash{}, err
		}
		s.setLog(f)
	}
	return f.Size(), f.Root(), nil
}

// LogSize is the committed tree's size: the largest seq stored, or what
// this handle committed last if that is larger (it may have committed
// since the read). The only writer (Config.OnlyWriter) knows it without a
// read: every event the file holds, its own commits appended, and the edge
// they leave is cached before they are answered (the log signer asks after
// every commit).
func (s *Store) LogSize(ctx context.Context) (int64, error) {
	if s.only {
		s.logMu.Lock()
		defer s.logMu.Unlock()
		return s.log.Size(), nil
	}
	n, err := logSize(ctx, s.reader)
	if err != nil {
		return 0, err
	}
	s.logMu.Lock()
	defer s.logMu.Unlock()
	return max(n, s.log.Size()), nil
}

// setLog caches a committed edge unless a larger one is cached already:
// the writer and LogHead both cache what they know is committed, in no
// particular order, and the log only grows.
func (s *Store) setLog(f auditlog.Frontier) {
	s.logMu.Lock()
	defer s.logMu.Unlock()
	if f.Size() >= s.log.Size() {
		s.log = f
	}
}

// LogEntries streams every event with its stored hashes, by seq. A column
// that does not hold what kin writes (a time that is not a number, say) is
// reported in Entry.Damaged rather than failing the read.
func (r reader) LogEntries(ctx context.Context, fn func(auditlog.Entry) error) error {
	rows, err := r.query(ctx, `SELECT seq, time, type, agent_id, parent_id, data, hashes FROM events ORDER BY seq`)
	if err != nil {
		return interpretError(err)
	}
	defer rows.Close()
	for rows.Next() {
		var en auditlog.Entry
		var at, typ, agent, parent, data any
		var hashes []byte
		if err := rows.Scan(&en.Event.Seq, &at, &typ, &agent, &parent, &data, &hashes); err != nil {
			return interpretError(err)
		}
		e := &en.Event
		var ns int64
		var ok [5]bool
		ns, ok[0] = at.(int64)
		e.Type, ok[1] = textOf(typ)
		var a, p int64
		a, ok[2] = agent.(int64)
		p, ok[3] = parent.(int64)
		var d string
		d, ok[4] = textOf(data)
		for i, name := range []string{"time", "type", "agent_id", "parent_id", "data"} {
			if !ok[i] {
				en.Damaged = fmt.Sprintf("its %s column holds %T, not what kin writes", name, []any{at, typ, agent, parent, data}[i])
				break
			}
		}
		e.Time, e.Agent, e.Parent, e.Data = time.Unix(0, ns).UTC(), kin.AgentID(a), kin.AgentID(p), []byte(d)
		en.Hashes = hashes
		if err := fn(en); err != nil {
			return err
		}
	}
	return interpretError(rows.Err())
}

func textOf(v any) (string, bool) {
	switch v := v.(type) {
	case string:
		return v, true
	case []byte:
		return string(v), true
	}
	return "", false
}

func (r reader) LogCheckpoints(ctx context.Context) ([]auditlog.StoredCheckpoint, error) {
	return r.checkpoints(ctx, `SELECT size, time, note FROM log_checkpoints ORDER BY size`)
}

// LogCheckpointLatest returns the checkpoint of the largest size, or
// store.ErrNotFound.
func (r reader) LogCheckpointLatest(ctx context.Context) (auditlog.StoredCheckpoint, error) {
	cs, err := r.checkpoints(ctx, `SELECT size, time, note FROM log_checkpoints ORDER BY size DESC LIMIT 1`)
	if err != nil {
		return auditlog.StoredCheckpoint{}, err
	}
	if len(cs) == 0 {
		return auditlog.StoredCheckpoint{}, store.ErrNotFound
	}
	return cs[0], nil
}

func (r reader) checkpoints(ctx context.Context, q string) ([]auditlog.StoredCheckpoint, error) {
	rows, err := r.query(ctx, q)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	var out []auditlog.StoredCheckpoint
	for rows.Next() {
		var c auditlog.StoredCheckpoint
		var at int64
		var note string
		if err := rows.Scan(&c.Size, &at, &note); err != nil {
			return nil, interpretError(err)
		}
		c.Time, c.Note = time.Unix(0, at).UTC(), []byte(note)
		out = append(out, c)
	}
	return out, interpretError(rows.Err())
}

// LogHashes returns tree hashes by tlog storage index: the large subtrees'
// from the stored forms of the leaves that completed them, the small ones
// (auditlog.SparseLevel) computed from the events under them.
func (r reader) LogHashes(ctx context.Context, indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	blobs := map[int64][]byte{}
	for i, x := range indexes {
		leaf, off, ok := auditlog.StoredAt(x)
		if !ok {
			h, err := r.computedHash(ctx, x)
			if err != nil {
				return nil, err
			}
			out[i] = h
			continue
		}
		blob, ok := blobs[leaf]
		if !ok {
			err := r.queryRow(ctx, sqlEventHashes, leaf+1).Scan(&blob)
			if errors.Is(err, sql.ErrNoRows) {
				return nil, fmt.Errorf("event log: event seq %d, which holds tree hash %d, is missing", leaf+1, x)
			}
			if err != nil {
				return nil, interpretError(err)
			}
			blobs[leaf] = blob
		}
		if len(blob) < off+tlog.HashSize {
			return nil, fmt.Errorf("event log: the tree hashes stored with event seq %d are damaged (%d bytes)", leaf+1, len(blob))
		}
		copy(out[i][:], blob[off:])
	}
	return out, nil
}

// computedHash hashes the events under a small subtree.
func (r reader) computedHash(ctx context.Context, x int64) (tlog.Hash, error) {
	first, count := auditlog.ComputedFrom(x)
	es, err := r.EventList(ctx, kin.EventFilter{Since: first, Limit: int(count)})
	if err != nil {
		return tlog.Hash{}, err
	}
	leaves := make([]tlog.Hash, len(es))
	for i, e := range es {
		if e.Seq != first+int64(i)+1 {
			return tlog.Hash{}, fmt.Errorf("event log: event seq %d, under tree hash %d, is missing", first+int64(i)+1, x)
		}
		leaves[i] = auditlog.LeafHash(e)
	}
	if int64(len(leaves)) != count {
		return tlog.Hash{}, fmt.Errorf("event log: event seq %d, under tree hash %d, is missing", first+int64(len(leaves))+1, x)
	}
	return auditlog.SubtreeHash(leaves)
}

// LogRegistration returns the agent.registered event of an agent, or
// store.ErrNotFound.
func (r reader) LogRegistration(ctx context.Context, id kin.AgentID) (kin.Event, error) {
	var e kin.Event
	var at int64
	var data string
	err := r.queryRow(ctx, `SELECT seq, time, type, agent_id, parent_id, data FROM events WHERE agent_id = ? AND type = ? ORDER BY seq LIMIT 1`,
		id, kin.EventAgentRegistered).Scan(&e.Seq, &at, &e.Type, &e.Agent, &e.Parent, &data)
	if err != nil {
		return kin.Event{}, interpretError(err)
	}
	e.Time, e.Data = time.Unix(0, at).UTC(), []byte(data)
	return e, nil
}

// LogSizeSQL is the log's size: seq is the rowid, so this reads one page
// path, not the table.
const LogSizeSQL = `SELECT COALESCE(MAX(seq), 0) FROM events`

// LogSizeTopSQL is LogSizeSQL with the largest agent id (Dialect.HoldInserts):
// one statement, one round trip.
const LogSizeTopSQL = `SELECT (` + LogSizeSQL + `), (SELECT COALESCE(MAX(id), 0) FROM agents)`

// logSizeTop is the log's size and, with top, the largest agent id.
func logSizeTop(ctx context.Context, r reader, top bool) (n, id int64, err error) {
	if !top {
		n, err = logSize(ctx, r)
		return n, 0, err
	}
	if err := r.queryRow(ctx, LogSizeTopSQL).Scan(&n, &id); err != nil {
		return 0, 0, interpretError(err)
	}
	return n, id, nil
}

func logSize(ctx context.Context, r reader) (int64, error) {
	var n int64
	if err := r.queryRow(ctx, LogSizeSQL).Scan(&n); err != nil {
		return 0, interpretError(err)
	}
	return n, nil
}

// loadLog rebuilds the committed tree's edge from the hashes stored with
// the newest events.
func loadLog(ctx context.Context, r reader) (auditlog.Frontier, error) {
	n, err := logSize(ctx, r)
	if err != nil {
		return auditlog.Frontier{}, err
	}
	return loadFrontier(ctx, r, n)
}

// loadFrontier rebuilds the edge of the tree of the first n events. An edge
// that cannot be read is an error that points at `kin log verify`:
// appending to a tree that cannot be continued would make every later proof
// wrong.
func loadFrontier(ctx context.Context, r reader, n int64) (auditlog.Frontier, error) {
	f, err := auditlog.LoadFrontier(n, tlog.HashReaderFunc(func(x []int64) ([]tlog.Hash, error) { return r.LogHashes(ctx, x) }))
	if err != nil {
		return auditlog.Frontier{}, fmt.Errorf("%w; the log cannot be continued: run `kin log verify --db` on a copy to see where it was damaged", err)
	}
	return f, nil
}

// ReadOnly is a kin database opened only to read its log (`kin log verify
// --db`): a driver checks the database is one and wraps its handle.
type ReadOnly struct {
	reader
	db *sql.DB
}

var _ auditlog.Source = (*ReadOnly)(nil)

// NewReadOnly reads the log of db, whose SQL d speaks.
func NewReadOnly(db *sql.DB, d *Dialect) *ReadOnly {
	return &ReadOnly{reader: reader{q: db, d: d, st: newStmts(db, d, true)}, db: db}
}

// Close closes the database.
func (r *ReadOnly) Close() error { return errors.Join(r.st.close(), r.db.Close()) }

// DB is the handle's database, for a driver's test that it refuses writes.
func (r *ReadOnly) DB() *sql.DB { return r.db }
