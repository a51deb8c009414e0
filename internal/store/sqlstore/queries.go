package sqlstore

import (
	"cmp"
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/kin-agents/kin/internal/auditlog"
	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/kin"
)

// queryer is what both *sql.DB and *sql.Tx offer.
type queryer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// reader implements store.Reader over the read pool or a transaction.
type reader struct {
	q     queryer
	d     *Dialect             // how q's database differs from the SQL written here
	tx    *sql.Tx              // set inside a transaction
	st    *stmts               // prepared statements of q's database
	local map[string]*sql.Stmt // inside a transaction: statements prepared on it, for queries outside st
	rc    *rowCache            // the read pool's row cache (rowcache.go), nil without one
}

// txn implements store.Tx.
type txn struct {
	reader
	log      *auditlog.Frontier // the batch's tree, advanced by EventAppend
	size     *int64             // the batch's log size, advanced by EventAppend
	unhashed bool               // benchmarks only: append events without their tree hashes
	appended int                // events this Update appended
	types    []string           // their types
	leaf     []byte             // EventAppend's buffers, reused across its calls
	hashes   []tlog.Hash
	blob     []byte
	batch    *batchCache // what the batch's Updates read often, valid while nobody writes it
	// top is the batch's largest agent id (Dialect.HoldInserts), advanced
	// by AgentInsert; nil where the database assigns ids.
	top *int64
	// held, in a deferred Update (store.Deferrer, Dialect.HoldInserts):
	// AgentInsert's write is held and tracked there; nil: written at once.
	held   *heldWrites
	update int // the Update's index in its batch, for held
	// counted: this Update wrote counters a chain holds (forgetChains):
	// its chain reads after that are neither remembered nor answered from
	// memory (the model gateway's metering reads the chain after adding
	// its spend: remembering it would only be forgotten at the next call).
	counted bool
}

// batchCache keeps, for one batch's transaction, what every registration
// reads and almost none writes: the settings (the governor's overrides).
// The batch holds the write lock, so no other handle changes them; a write
// of this batch, or an Update that fails (its writes undone), forgets them.
type batchCache struct {
	settings map[string]string // nil: not read since the last change
	// events are the batch's appended events not yet inserted
	// (Dialect.InsertEvents, EventRowsPerInsert: at the batch's end,
	// before the commit).
	events []EventRow
	// wrote is the agents whose rows the batch's Updates changed, for the
	// row cache (rowcache.go; nil without one: not kept). An Update undone
	// leaves its ids here: dropping a row that did not change costs a read.
	wrote []kin.AgentID
	// inserted is the agents the batch's Updates inserted, for the row
	// cache's warmer (rowwarm.go; with wrote, read into the cache once
	// committed). An Update undone leaves its ids here: a row not there
	// is not read.
	inserted []kin.AgentID
	track    bool // keep wrote and inserted
}

// wrote records that the batch changed ids' rows (batchCache.wrote).
func (t *txn) wrote(ids ...kin.AgentID) {
	if t.batch != nil && t.batch.track {
		t.batch.wrote = append(t.batch.wrote, ids...)
	}
}

// inserted records that the batch inserted agent id (batchCache.inserted).
func (t *txn) inserted(id kin.AgentID) {
	if t.batch != nil && t.batch.track {
		t.batch.inserted = append(t.batch.inserted, id)
	}
}

// rowsWritten is told, before the statement, that t writes the agents'
// rows of ids: what the writer keeps of them is forgotten (the chains it
// remembers on a server, speculate.go; its permission rows, permmemo.go) and the
// row cache is told at the commit (batchCache.wrote).
func (t *txn) rowsWritten(ids ...kin.AgentID) {
	for _, id := range ids {
		t.forgetChain(id)
	}
	if m := t.perm(); m != nil {
		m.drop(ids...)
	}
	t.wrote(ids...)
}

func (c *batchCache) forget() {
	if c != nil {
		c.settings = nil
	}
}

func (r reader) stmt(ctx context.Context, q string) *sql.Stmt {
	st := r.st.get(ctx, q)
	switch {
	case st != nil && r.tx != nil:
		st = r.tx.StmtContext(ctx, st) // reuses the statement prepared on the writer's connection
	case st == nil && r.local != nil:
		// A query built from parameters (AgentUpdate's columns, say) runs
		// many times in one batch: prepare it once for this transaction.
		if st = r.local[q]; st == nil {
			var err error
			if st, err = r.tx.PrepareContext(ctx, r.d.rebind(q)); err != nil {
				return nil
			}
			r.local[q] = st
		}
	}
	return st
}

func (r reader) query(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	rows, err := r.query1(ctx, q, args...)
	if r.tx == nil && r.d.lost(err) {
		rows, err = r.query1(ctx, q, args...) // a read is safe to run again
	}
	return rows, err
}

func (r reader) query1(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	if st := r.stmt(ctx, q); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return r.q.QueryContext(ctx, r.d.rebind(q), args...)
}

// bulk runs read, one chunk of a large read (large), with a reader on a
// connection of its own between the dialect's BulkReadOn and BulkReadOff;
// with r itself when the read is not large, inside a transaction, or
// where the dialect has none.
func (r reader) bulk(ctx context.Context, large bool, read func(r reader) error) error {
	db, ok := r.q.(*sql.DB)
	if !large || !ok || r.tx != nil || r.d.BulkReadOn == "" {
		return read(r)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return interpretError(err)
	}
	defer conn.Close()
	discard := func() { conn.Raw(func(any) error { return driver.ErrBadConn }) } //nolint:errcheck // it closes the connection
	if _, err := conn.ExecContext(ctx, r.d.BulkReadOn); err != nil {
		discard()
		return interpretError(err)
	}
	err = read(reader{q: conn, d: r.d})
	if _, offErr := conn.ExecContext(context.WithoutCancel(ctx), r.d.BulkReadOff); offErr != nil {
		discard() // it would keep the mode in the pool
	}
	return err
}

func (r reader) queryRow(ctx context.Context, q string, args ...any) *sql.Row {
	row := r.queryRow1(ctx, q, args...)
	if r.tx == nil && r.d.lost(row.Err()) {
		row = r.queryRow1(ctx, q, args...) // a read is safe to run again
	}
	return row
}

func (r reader) queryRow1(ctx context.Context, q string, args ...any) *sql.Row {
	if st := r.stmt(ctx, q); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return r.q.QueryRowContext(ctx, r.d.rebind(q), args...)
}

func (r reader) exec(ctx context.Context, q string, args ...any) (sql.Result, error) {
	if st := r.stmt(ctx, q); st != nil {
		return st.ExecContext(ctx, args...)
	}
	return r.q.ExecContext(ctx, r.d.rebind(q), args...)
}

var _ store.Tx = (*txn)(nil)

// liveSQL is kin.Agent.Live as SQL.
var liveSQL = liveSQLOf("")

// liveSQLOf is liveSQL with its columns qualified by prefix ("a.").
func liveSQLOf(prefix string) string {
	quoted := make([]string, len(kin.TerminalStates))
	for i, s := range kin.TerminalStates {
		quoted[i] = "'" + string(s) + "'"
	}
	return prefix + "status IN ('active', 'suspended') AND " + prefix + "state NOT IN (" + strings.Join(quoted, ", ") + ")"
}

func (r reader) agents(ctx context.Context, query string, args ...any) ([]*kin.Agent, error) {
	return r.agentsOf(ctx, unpackAgent, query, args...)
}

// agentsOf is agents of rows that unpack takes apart (a lean row's).
func (r reader) agentsOf(ctx context.Context, unpack func(string) (*kin.Agent, error), query string, args ...any) ([]*kin.Agent, error) {
	rows, err := r.query(ctx, query, args...)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	var out []*kin.Agent
	for rows.Next() {
		var packed string
		if err := rows.Scan(&packed); err != nil {
			return nil, interpretError(err)
		}
		a, err := unpack(packed)
		if err != nil {
			return nil, interpretError(err)
		}
		out = append(out, a)
	}
	return out, interpretError(rows.Err())
}

func (r reader) AgentGetByID(ctx context.Context, id kin.AgentID) (*kin.Agent, error) {
	a, err := scanAgent(r.queryRow(ctx, sqlAgentByID, id))
	return a, interpretError(err)
}

func (r reader) AgentList(ctx context.Context, f kin.AgentFilter) ([]*kin.Agent, error) {
	var where []string
	var args []any
	if f.Status != "" {
		where, args = append(where, "status = ?"), append(args, f.Status)
	}
	if f.State != "" {
		where, args = append(where, "state = ?"), append(args, f.State)
	}
	if f.Role != "" {
		where, args = append(where, "role = ?"), append(args, f.Role)
	}
	if f.HasParent || f.Parent != 0 {
		where, args = append(where, "parent_id = ?"), append(args, f.Parent)
	}
	if f.Responsible != "" {
		where, args = append(where, "responsible = ?"), append(args, f.Responsible)
	}
	if f.Name != "" {
		where, args = append(where, "name = ?"), append(args, f.Name)
	}
	if len(where) == 0 && f.Limit <= 0 {
		if out, ok, err := r.agentsByRange(ctx); ok {
			return out, err
		}
	}
	q := `SELECT ` + agentColumns + ` FROM agents a`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY id"
	if f.Limit > 0 {
		q += fmt.Sprintf(" LIMIT %d", f.Limit)
	}
	return r.agents(ctx, q, args...)
}

func (r reader) AgentAncestors(ctx context.Context, id kin.AgentID) ([]*kin.Agent, error) {
	out, err := r.agents(ctx, sqlAgentAncestors, id)
	if err == nil && len(out) == 0 {
		err = store.ErrNotFound
	}
	return out, err
}

func (r reader) AgentSubtree(ctx context.Context, id kin.AgentID) ([]*kin.Agent, error) {
	out, err := r.agents(ctx, sqlAgentSubtree, id)
	if err == nil && len(out) == 0 {
		err = store.ErrNotFound
	}
	// The order is applied here rather than with ORDER BY: SQLite would copy
	// every wide row through its sorter, some 15% of the query's time
	// for a 10k-agent subtree, where sorting the pointers takes a millisecond.
	slices.SortFunc(out, func(x, y *kin.Agent) int {
		return cmp.Or(cmp.Compare(x.Generation, y.Generation), cmp.Compare(x.ID, y.ID))
	})
	return out, err
}

func (r reader) AgentLinks(ctx context.Context) ([]store.AgentLink, error) {
	rows, err := r.query(ctx, `SELECT id, parent_id FROM agents ORDER BY id`)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	var out []store.AgentLink
	for rows.Next() {
		var l store.AgentLink
		if err := rows.Scan(&l.ID, &l.Parent); err != nil {
			return nil, interpretError(err)
		}
		out = append(out, l)
	}
	return out, interpretError(rows.Err())
}

// parallelReadMin is the number of ids from which AgentListByIDs splits
// its read across the read pool's connections, one chunk a CPU.
const parallelReadMin = 4096

func (r reader) AgentListByIDs(ctx context.Context, ids []kin.AgentID) ([]*kin.Agent, error) {
	return r.listByIDs(ctx, unpackAgent, sqlAgentListByIDs, ids)
}

func (r reader) AgentListLeanByIDs(ctx context.Context, ids []kin.AgentID) ([]*kin.Agent, error) {
	return r.listByIDs(ctx, unpackLean, sqlAgentLeanByIDs, ids)
}

// listByIDs is AgentListByIDs with query's rows, which unpack takes apart.
func (r reader) listByIDs(ctx context.Context, unpack func(string) (*kin.Agent, error), query string, ids []kin.AgentID) ([]*kin.Agent, error) {
	if len(ids) == 0 {
		return []*kin.Agent{}, nil
	}
	var out []*kin.Agent
	var err error
	if c := r.cache(len(ids)); c != nil && (query == sqlAgentListByIDs || query == sqlAgentLeanByIDs) {
		// A large lean read (a cancellation's plan) takes the cache's
		// whole rows, and keeps only its fields: 1-6 ms for the 1,111
		// rows of BenchmarkCascade1000's tree, where SQLite packed their
		// lean rows in 7-9 ms (a cold cache reads the whole rows it
		// lacks, and then holds them).
		out, err = r.cachedList(ctx, c, ids)
		if err == nil && query == sqlAgentLeanByIDs {
			for _, a := range out {
				keepLean(a)
			}
		}
	} else {
		out, err = r.readList(ctx, unpack, query, ids)
	}
	if err != nil {
		return nil, err
	}
	// Put the rows in the caller's order here: an ORDER BY would copy
	// every wide row through SQLite's sorter. Each row goes to the slot of
	// its id's first place in ids (a sort comparing positions looked each
	// up in the map some 28 times a row for 10,000 rows).
	pos := make(map[kin.AgentID]int, len(ids))
	for i, id := range ids {
		if _, dup := pos[id]; !dup {
			pos[id] = i
		}
	}
	slots := make([]*kin.Agent, len(ids))
	for _, a := range out {
		slots[pos[a.ID]] = a
	}
	out = out[:0]
	for _, a := range slots {
		if a != nil {
			out = append(out, a)
		}
	}
	return out, nil
}

// readList is listByIDs's read from the database, in any order.
func (r reader) readList(ctx context.Context, unpack func(string) (*kin.Agent, error), query string, ids []kin.AgentID) ([]*kin.Agent, error) {
	chunks := readChunks()
	if r.tx != nil || len(ids) < parallelReadMin || chunks < 2 {
		return r.agentsOf(ctx, unpack, query, idArray(ids))
	}
	// A large subtree is read in parallel chunks, each a range of the
	// ids in ascending order: a chunk then reads its pages of the
	// table once and in order, and no page is read by two chunks (in
	// the caller's order, a tree's, each went back and forth over the
	// whole file, re-reading pages its cache had dropped).
	sorted := slices.Clone(ids)
	slices.Sort(sorted)
	size := (len(sorted) + chunks - 1) / chunks
	return r.inParallel(chunks, func(c int) ([]*kin.Agent, error) {
		lo, hi := c*size, min((c+1)*size, len(sorted))
		if lo >= hi {
			return nil, nil
		}
		var part []*kin.Agent
		err := r.bulk(ctx, true, func(r reader) (err error) {
			part, err = r.agentsOf(ctx, unpack, query, idArray(sorted[lo:hi]))
			return err
		})
		return part, err
	})
}

// cache is the row cache for a read of n ids outside a transaction, nil
// where it is not used (none, a transaction, a small read).
func (r reader) cache(n int) *rowCache {
	if r.rc == nil || r.tx != nil || n < cachedReadMin {
		return nil
	}
	return r.rc
}

// cachedList is readList's agents (whole rows) from the row cache and,
// for the rows it lacks, the database, which it then holds; in ascending
// id order.
func (r reader) cachedList(ctx context.Context, c *rowCache, ids []kin.AgentID) ([]*kin.Agent, error) {
	since := c.begin()
	sorted := slices.Clone(ids)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	rows := make([]string, len(sorted))
	if missing := c.get(sorted, rows); missing > 0 {
		k := 0 // the next of sorted to match a row read
		err := r.readMissing(ctx, c, since, sorted, rows, missing, func(id kin.AgentID, _ []byte, row string) error {
			for k < len(sorted) && sorted[k] < id {
				k++
			}
			if k < len(sorted) && sorted[k] == id {
				rows[k] = row
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	// Taken apart in parallel: about a millisecond per 1,000 rows.
	chunks := readChunks()
	size := (len(rows) + chunks - 1) / chunks
	return r.inParallel(chunks, func(c int) ([]*kin.Agent, error) {
		lo, hi := min(c*size, len(rows)), min((c+1)*size, len(rows))
		part := make([]*kin.Agent, 0, hi-lo)
		for _, row := range rows[lo:hi] {
			if row == "" {
				continue // no such agent
			}
			a, err := unpackAgent(row)
			if err != nil {
				return nil, interpretError(err)
			}
			part = append(part, a)
		}
		return part, nil
	})
}

// eachRecord calls fn with the id, the whole record and the row of each
// "<length>:<row>" record in records (rowsOf's), the row being a packed
// row (agentColumns: its id first), until fn fails.
func eachRecord(records []byte, fn func(id kin.AgentID, record, row []byte) error) error {
	for len(records) > 0 {
		n, i, ok := leadingInt(records, ':')
		if !ok || n > int64(len(records)-i-1) {
			return errors.New("store: malformed row record")
		}
		row := records[i+1 : i+1+int(n)]
		id, _, ok := leadingInt(row, ',')
		if !ok {
			return errors.New("store: malformed agent row: no id")
		}
		if err := fn(kin.AgentID(id), records[:i+1+int(n)], row); err != nil {
			return err
		}
		records = records[i+1+int(n):]
	}
	return nil
}

// leadingInt is the decimal of at most 18 digits that starts b and ends
// at its first end, and where that end is.
func leadingInt(b []byte, end byte) (n int64, at int, ok bool) {
	for at = 0; at < len(b) && at <= 18; at++ {
		c := b[at]
		if c == end {
			return n, at, at > 0
		}
		if c < '0' || c > '9' {
			return 0, 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return 0, 0, false
}

// AgentRowFields names the fields of AgentRowsByIDs's rows, in order.
func (r reader) AgentRowFields() []string { return slices.Clone(agentRowFields) }

// rowsFlush is how many bytes of rows AgentRowsByIDs gathers before it
// hands them on.
const rowsFlush = 64 << 10

// AgentRowsByIDs reads the agents with the given ids in ascending id order
// and hands their rows on as they come, without taking them apart: a
// large list is read in parallel chunks of ids, each chunk's rows passed
// to emit (from the caller's goroutine, in order) once the chunks before
// it were; through the row cache where there is one.
func (r reader) AgentRowsByIDs(ctx context.Context, ids []kin.AgentID, emit func(records []byte) error) error {
	if len(ids) == 0 {
		return nil
	}
	sorted := slices.Clone(ids)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	if c := r.cache(len(sorted)); c != nil {
		return r.cachedRows(ctx, c, sorted, emit)
	}
	return r.rowsByIDs(ctx, sorted, emit)
}

// cachedRows is AgentRowsByIDs of sorted (ascending, distinct) through the
// row cache: the rows it holds, merged in id order with those read from
// the database as they come, which it then holds.
func (r reader) cachedRows(ctx context.Context, c *rowCache, sorted []kin.AgentID, emit func(records []byte) error) error {
	since := c.begin()
	rows := make([]string, len(sorted))
	missing := c.get(sorted, rows)
	buf := make([]byte, 0, rowsFlush+4096)
	flush := func() error {
		if len(buf) == 0 {
			return nil
		}
		err := emit(buf)
		buf = buf[:0] // emit is done with it (store.Reader.AgentRowsByIDs)
		return err
	}
	k := 0 // the next of sorted to hand on
	// upTo hands on the cached rows of sorted below id.
	upTo := func(id kin.AgentID) error {
		for ; k < len(sorted) && sorted[k] < id; k++ {
			if row := rows[k]; row != "" {
				buf = strconv.AppendInt(buf, int64(len(row)), 10)
				buf = append(buf, ':')
				buf = append(buf, row...)
				if len(buf) >= rowsFlush {
					if err := flush(); err != nil {
						return err
					}
				}
			}
		}
		return nil
	}
	if missing > 0 {
		err := r.readMissing(ctx, c, since, sorted, rows, missing, func(id kin.AgentID, record []byte, _ string) error {
			if err := upTo(id); err != nil {
				return err
			}
			if k < len(sorted) && sorted[k] == id {
				k++
			}
			buf = append(buf, record...)
			if len(buf) >= rowsFlush {
				return flush()
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	if err := upTo(math.MaxInt64); err != nil {
		return err
	}
	return flush()
}

// readMissing reads from the database the rows of sorted (ascending,
// distinct) that rows lacks (rows[i] is sorted[i]'s cached row, "" for
// none; missing of them), calls each with every row read, in ascending id
// order (its id, its "<length>:<row>" record and the row), and puts them
// in c as rows of a read that began at since.
func (r reader) readMissing(ctx context.Context, c *rowCache, since uint64, sorted []kin.AgentID, rows []string, missing int, each func(id kin.AgentID, record []byte, row string) error) error {
	ask := make([]kin.AgentID, 0, missing)
	for i, row := range rows {
		if row == "" {
			ask = append(ask, sorted[i])
		}
	}
	var read []kin.AgentID
	var readRows []string
	err := r.rowsByIDs(ctx, ask, func(records []byte) error {
		return eachRecord(records, func(id kin.AgentID, record, row []byte) error {
			s := string(row)
			read, readRows = append(read, id), append(readRows, s)
			return each(id, record, s)
		})
	})
	if err != nil {
		return err
	}
	c.fill(since, read, readRows)
	return nil
}

// rowsByIDs is AgentRowsByIDs of sorted (ascending, distinct) from the
// database.
func (r reader) rowsByIDs(ctx context.Context, sorted []kin.AgentID, emit func(records []byte) error) error {
	if len(sorted) == 0 {
		return nil
	}
	chunks := readChunks()
	if r.tx != nil || len(sorted) < parallelReadMin || chunks < 2 {
		chunks = 1
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	size := (len(sorted) + chunks - 1) / chunks
	// Each chunk sends runs of records on its channel and closes it; its
	// error (if any) is read after the close.
	outs := make([]chan []byte, chunks)
	errs := make([]error, chunks)
	var wg sync.WaitGroup
	defer wg.Wait()
	for c := range chunks {
		outs[c] = make(chan []byte, 64)
		lo, hi := min(c*size, len(sorted)), min((c+1)*size, len(sorted))
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(outs[c])
			if lo < hi {
				errs[c] = r.rowsOf(ctx, sorted[lo:hi], len(sorted) >= parallelReadMin, outs[c])
			}
		}()
	}
	var failed error
	for c := range chunks {
		for b := range outs[c] {
			if failed == nil {
				if failed = emit(b); failed != nil {
					cancel() // the readers stop at their next row
				}
			}
		}
		if failed == nil && errs[c] != nil {
			failed = errs[c]
			cancel()
		}
	}
	return failed
}

// rowsOf reads the packed rows of ids (ascending) and sends them on out as
// "<length>:<row>" records, about rowsFlush bytes at a time. It never
// waits for out while its statement is open: a run that out has no room
// for waits in memory, and the connection goes back to the pool once the
// rows are read, so a slow reader of a streamed tree (an agent that stops
// reading its subtree) holds no store connection (a chunk in memory at
// most, as the tree built whole did). A large read's chunk runs as
// reader.bulk's.
func (r reader) rowsOf(ctx context.Context, ids []kin.AgentID, large bool, out chan<- []byte) error {
	var pending [][]byte
	offer := func() { // sends what out has room for, without waiting
		for len(pending) > 0 {
			select {
			case out <- pending[0]:
				pending = pending[1:]
			default:
				return
			}
		}
	}
	err := r.bulk(ctx, large, func(r reader) error {
		rows, err := r.query(ctx, sqlAgentRowsByIDs, idArray(ids))
		if err != nil {
			return interpretError(err)
		}
		defer rows.Close()
		buf := make([]byte, 0, rowsFlush+4096)
		for rows.Next() {
			var row sql.RawBytes
			if err := rows.Scan(&row); err != nil {
				return interpretError(err)
			}
			buf = strconv.AppendInt(buf, int64(len(row)), 10)
			buf = append(buf, ':')
			buf = append(buf, row...)
			if len(buf) >= rowsFlush {
				pending = append(pending, buf)
				offer()
				buf = make([]byte, 0, rowsFlush+4096)
			}
		}
		if err := rows.Err(); err != nil {
			return interpretError(err)
		}
		if len(buf) > 0 {
			pending = append(pending, buf)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, b := range pending {
		select {
		case out <- b:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// readChunks is how many connections one large read is split over.
func readChunks() int { return min(runtime.GOMAXPROCS(0), 8) }

// inParallel runs read for chunks 0..n-1 at once and returns their rows in
// chunk order. Each chunk may see a slightly later snapshot than the one
// before; a list or a tree view does not promise more than each row being
// committed. Only outside a transaction (each chunk takes a connection of
// the read pool).
func (r reader) inParallel(n int, read func(c int) ([]*kin.Agent, error)) ([]*kin.Agent, error) {
	parts := make([][]*kin.Agent, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for c := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			parts[c], errs[c] = read(c)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return slices.Concat(parts...), nil
}

// agentsByRange reads every agent, by id, in parallel ranges of ids when
// there are many (the forest of kin tree, kin ps): ok false when it did
// not (a transaction, one processor, or few agents), for the caller's one
// statement.
func (r reader) agentsByRange(ctx context.Context) (out []*kin.Agent, ok bool, err error) {
	chunks := readChunks()
	if r.tx != nil || chunks < 2 {
		return nil, false, nil
	}
	var top int64
	if err := r.queryRow(ctx, `SELECT COALESCE(MAX(id), 0) FROM agents`).Scan(&top); err != nil {
		return nil, true, interpretError(err)
	}
	if top < parallelReadMin {
		return nil, false, nil
	}
	// The last range is open above: an agent registered after the MAX
	// is read if its range's statement sees it, as one statement would.
	size := (top + int64(chunks) - 1) / int64(chunks)
	out, err = r.inParallel(chunks, func(c int) ([]*kin.Agent, error) {
		lo, hi := int64(c)*size, int64(c+1)*size
		if c == chunks-1 {
			hi = math.MaxInt64
		}
		var part []*kin.Agent
		err := r.bulk(ctx, true, func(r reader) (err error) {
			part, err = r.agents(ctx, `SELECT `+agentColumns+` FROM agents a WHERE a.id > ? AND a.id <= ? ORDER BY a.id`, lo, hi)
			return err
		})
		return part, err
	})
	return out, true, err
}

func (r reader) AgentListByParents(ctx context.Context, parents []kin.AgentID) ([]*kin.Agent, error) {
	if len(parents) == 0 {
		return []*kin.Agent{}, nil
	}
	return r.agents(ctx, sqlAgentByParents, idArray(parents))
}

// idArray writes ids as a JSON array, which SQLite unnests with json_each:
// one statement for any number of ids.
func idArray(ids []kin.AgentID) string {
	b := make([]byte, 0, len(ids)*7)
	b = append(b, '[')
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(id), 10)
	}
	return string(append(b, ']'))
}

func (r reader) AgentCount(ctx context.Context) (int, error) {
	var n int
	err := r.queryRow(ctx, `SELECT COUNT(*) FROM agents`).Scan(&n)
	return n, interpretError(err)
}

func (r reader) EventList(ctx context.Context, f kin.EventFilter) ([]kin.Event, error) {
	where := []string{"seq > ?"}
	args := []any{f.Since}
	if f.Before > 0 {
		where, args = append(where, "seq < ?"), append(args, f.Before)
	}
	switch {
	case f.Agent != 0 && f.Subject:
		where, args = append(where, "agent_id = ?"), append(args, f.Agent)
	case f.Agent != 0:
		where, args = append(where, "(agent_id = ? OR parent_id = ?)"), append(args, f.Agent, f.Agent)
	}
	if len(f.Types) > 0 {
		where = append(where, "type IN (?"+strings.Repeat(", ?", len(f.Types)-1)+")")
		for _, t := range f.Types {
			args = append(args, t)
		}
	}
	q := `SELECT seq, time, type, agent_id, parent_id, data FROM events WHERE ` + strings.Join(where, " AND ") + ` ORDER BY seq`
	if f.Before > 0 {
		q += " DESC" // the last Limit before it; reversed below
	}
	if f.Limit > 0 {
		q += fmt.Sprintf(" LIMIT %d", f.Limit)
	}
	rows, err := r.query(ctx, q, args...)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	var out []kin.Event
	for rows.Next() {
		var e kin.Event
		var at int64
		var data string
		if err := rows.Scan(&e.Seq, &at, &e.Type, &e.Agent, &e.Parent, &data); err != nil {
			return nil, interpretError(err)
		}
		e.Time = time.Unix(0, at).UTC()
		e.Data = []byte(data)
		out = append(out, e)
	}
	if f.Before > 0 {
		slices.Reverse(out)
	}
	return out, interpretError(rows.Err())
}

func (r reader) EventLastSeq(ctx context.Context) (int64, error) {
	var n int64
	err := r.queryRow(ctx, `SELECT COALESCE(MAX(seq), 0) FROM events`).Scan(&n)
	return n, interpretError(err)
}

func (r reader) SettingList(ctx context.Context) (map[string]string, error) {
	rows, err := r.query(ctx, sqlSettingList)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return nil, interpretError(err)
		}
		out[k] = v
	}
	return out, interpretError(rows.Err())
}

func (t *txn) AgentInsert(ctx context.Context, p store.AgentInsertParams) (*kin.Agent, error) {
	a := p.Agent
	var wallet any
	if a.Wallet != "" {
		wallet = a.Wallet
	}
	args := []any{a.Name, p.NameContext, a.Role, a.Parent, a.Generation, a.Responsible, wallet,
		a.ConstitutionHash, a.CapabilityHash, a.Scope, boolInt(a.SelfModifying), a.Life, a.Status, a.State,
		a.CreatedAt.UnixNano(), a.CreatedBy, a.UpdatedAt.UnixNano(),
		jsonList(a.Command), jsonList(p.Env), p.Dir, a.Restart, int64(a.Grace), a.Replaces, a.Result, string(p.Handoff),
		a.Stage, string(p.Policy), nanos(p.DeadlineAt), a.Host, a.RequestedBy}
	if t.held != nil {
		// Deferred (held.go; t.top is set wherever t.held is): the next
		// id is assigned here and the write sent with the next statement.
		id := *t.top + 1
		if _, err := t.execHeld(ctx, sqlAgentInsertID, append([]any{id}, args...)...); err != nil {
			return nil, interpretError(err)
		}
		*t.top = id
		a.ID = kin.AgentID(id)
		t.inserted(a.ID)
		return &a, nil
	}
	id, err := t.insertAgent(ctx, args)
	if err != nil {
		return nil, interpretError(err)
	}
	if t.top != nil {
		*t.top = max(*t.top, id)
	}
	a.ID = kin.AgentID(id)
	t.inserted(a.ID)
	return &a, nil
}

// insertAgent runs the insert of an agent whose id the database assigns,
// and returns the id.
func (t *txn) insertAgent(ctx context.Context, args []any) (int64, error) {
	if t.d.InsertRowID {
		res, err := t.exec(ctx, sqlAgentInsertRowID, args...)
		if err != nil {
			return 0, err
		}
		return res.LastInsertId()
	}
	var id int64
	err := t.queryRow(ctx, sqlAgentInsert, args...).Scan(&id)
	return id, err
}

func (t *txn) AgentUpdateStatus(ctx context.Context, p store.AgentUpdateStatusParams) error {
	t.rowsWritten(p.ID)
	res, err := t.exec(ctx, sqlAgentUpdateStatus,
		p.Status, p.State, p.State, p.At.UnixNano(), p.ID)
	return affectedOne(res, err)
}

func (t *txn) AgentUpdate(ctx context.Context, p store.AgentUpdateParams) error {
	t.rowsWritten(p.ID)
	if p.Stage != nil {
		t.forgetStage()
	}
	set, args := agentUpdateSet(p)
	res, err := t.exec(ctx, `UPDATE agents SET `+set+` WHERE id = ?`, append(args, p.ID)...)
	return affectedOne(res, err)
}

// sqlAgentUpdateManyWhere is AgentUpdateMany's choice of rows, whatever it
// sets (its plan is checked with the walks': WalkQueries).
const sqlAgentUpdateManyWhere = ` WHERE id IN (SELECT value FROM json_each(?))`

// sqlAgentUpdateManyWhereLateral is the same where Dialect.Lateral
// (lateral.go): PostgreSQL kept a plan hashing the whole agents table for
// the shared form. Each row's location is looked up by its key, and the
// rows updated by location.
const sqlAgentUpdateManyWhereLateral = ` WHERE ctid = ANY(ARRAY(SELECT a.ctid FROM (SELECT DISTINCT value FROM json_each(?)) i
	CROSS JOIN LATERAL (SELECT ctid FROM agents a WHERE a.id = i.value OFFSET 0) a))`

func (t *txn) AgentUpdateMany(ctx context.Context, ids []kin.AgentID, p store.AgentUpdateParams) error {
	if len(ids) == 0 {
		return nil
	}
	if p.Stage != nil {
		t.forgetStage()
	}
	t.rowsWritten(ids...)
	distinct := make(map[kin.AgentID]struct{}, len(ids))
	for _, id := range ids {
		distinct[id] = struct{}{}
	}
	set, args := agentUpdateSet(p)
	where := sqlAgentUpdateManyWhere
	if t.d.Lateral {
		where = sqlAgentUpdateManyWhereLateral
	}
	res, err := t.exec(ctx, `UPDATE agents SET `+set+where, append(args, idArray(ids))...)
	if err != nil {
		return interpretError(err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return interpretError(err)
	}
	if n != int64(len(distinct)) {
		// Some id is no agent's: the caller's Update fails, which undoes
		// the rows this changed.
		return fmt.Errorf("%w: %d of the %d ids to update are no agent's", store.ErrNotFound, int64(len(distinct))-n, len(distinct))
	}
	return nil
}

// agentUpdateSet is the SET list of an update of the fields p sets (p.ID
// aside), with its arguments.
func agentUpdateSet(p store.AgentUpdateParams) (string, []any) {
	set := []string{"updated_at = ?"}
	args := []any{p.At.UnixNano()}
	add := func(col string, v any) {
		set = append(set, col+" = ?")
		args = append(args, v)
	}
	if p.Status != nil {
		add("status", *p.Status)
	}
	if p.State != nil {
		add("state", *p.State)
	}
	if p.PID != nil {
		add("pid", *p.PID)
	}
	if p.StartedAt != nil {
		add("started_at", nanos(*p.StartedAt))
	}
	if p.EndedAt != nil {
		add("ended_at", nanos(*p.EndedAt))
	}
	if p.Exit != nil {
		known := 2
		if p.Exit.Known {
			known = 1
		}
		add("exit_state", known)
		add("exit_code", p.Exit.Code)
		add("exit_signal", p.Exit.Signal)
	}
	if p.EndReason != nil {
		add("end_reason", *p.EndReason)
	}
	if p.Cursor != nil {
		add("cursor", *p.Cursor)
	}
	if p.LastHeartbeat != nil {
		add("last_heartbeat", nanos(*p.LastHeartbeat))
	}
	if p.Session != nil {
		add("session", *p.Session)
	}
	if p.Result != nil {
		add("result", *p.Result)
	}
	if p.Stage != nil {
		add("stage", *p.Stage)
	}
	return strings.Join(set, ", "), args
}

func (r reader) AgentProcessSpec(ctx context.Context, id kin.AgentID) (store.ProcessSpec, error) {
	var spec store.ProcessSpec
	var cmd, env, handoff string
	var grace int64
	err := r.queryRow(ctx, `SELECT command, env, dir, restart, grace, handoff FROM agents WHERE id = ?`, id).Scan(&cmd, &env, &spec.Dir, &spec.Restart, &grace, &handoff)
	if err != nil {
		return spec, interpretError(err)
	}
	if cmd == "" {
		return spec, store.ErrNotFound
	}
	spec.Grace = kin.Duration(grace)
	if handoff != "" {
		spec.Handoff = []byte(handoff)
	}
	if err := json.Unmarshal([]byte(cmd), &spec.Command); err != nil {
		return spec, fmt.Errorf("store: agent %d command: %w", id, err)
	}
	if env != "" {
		if err := json.Unmarshal([]byte(env), &spec.Env); err != nil {
			return spec, fmt.Errorf("store: agent %d env: %w", id, err)
		}
	}
	return spec, nil
}

// boolInt stores a flag as 1 or 0: the columns are integers on every
// engine (PostgreSQL would not take a Go bool for one).
func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// jsonList stores a list as a JSON array, an empty one as "". '<', '>'
// and '&' are kept as they are: json.Marshal's escapes (\u003c and the
// like) made every command with a redirect or an && one that
// jsonlist.Parse hands to encoding/json. Both forms read back the same.
func jsonList(l []string) string {
	if len(l) == 0 {
		return ""
	}
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(l) //nolint:errcheck // strings always encode
	return strings.TrimSuffix(b.String(), "\n")
}

func (t *txn) AgentUpdateSpawnBlock(ctx context.Context, id kin.AgentID, until time.Time) error {
	t.rowsWritten(id)
	res, err := t.exec(ctx, sqlAgentSpawnBlock, until.UnixNano(), id)
	return affectedOne(res, err)
}

func affectedOne(res sql.Result, err error) error {
	if err != nil {
		return interpretError(err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return interpretError(err)
	}
	if n == 0 {
		return store.ErrNotFound
	}
	return nil
}

func (t *txn) AgentCountLive(ctx context.Context, p store.AgentCountLiveParams) (int, error) {
	var args []any
	if p.HasParent {
		args = append(args, p.Parent)
	}
	if p.Role != "" {
		args = append(args, p.Role)
	}
	if p.NameContext != nil {
		args = append(args, *p.NameContext)
	}
	if p.Host != nil {
		args = append(args, *p.Host)
	}
	if p.Except != 0 {
		args = append(args, p.Except)
	}
	var n int
	err := t.queryRow(ctx, countLiveSQL(p.HasParent, p.Role != "", p.NameContext != nil, p.Host != nil, p.Accountable, p.Except != 0), args...).Scan(&n)
	return n, interpretError(err)
}

func (r reader) AgentNamesOfHost(ctx context.Context, host string) ([]store.AgentName, error) {
	rows, err := r.query(ctx, `SELECT name, MAX(id) FROM agents WHERE ? = '' OR host = '' OR host = ? GROUP BY name ORDER BY name`, host, host)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	var out []store.AgentName
	for rows.Next() {
		var n store.AgentName
		if err := rows.Scan(&n.Name, &n.ID); err != nil {
			return nil, interpretError(err)
		}
		out = append(out, n)
	}
	return out, interpretError(rows.Err())
}

func (r reader) AgentLiveByName(ctx context.Context, name string) (*kin.Agent, error) {
	a, err := scanAgent(r.queryRow(ctx, sqlAgentLiveByName, name))
	return a, interpretError(err)
}

func (t *txn) AgentWalletExists(ctx context.Context, wallet string) (bool, error) {
	var n int
	err := t.queryRow(ctx, sqlAgentWalletExists, wallet).Scan(&n)
	return n > 0, interpretError(err)
}

func (t *txn) SpawnRejectionInsert(ctx context.Context, p store.SpawnRejectionInsertParams) error {
	_, err := t.exec(ctx, sqlRejectionInsert, p.Parent, p.At.UnixNano(), boolInt(p.Counted))
	return interpretError(err)
}

func (t *txn) SpawnRejectionCount(ctx context.Context, parent kin.AgentID, since time.Time) (int, error) {
	var n int
	err := t.queryRow(ctx, sqlRejectionCount, parent, since.UnixNano()).Scan(&n)
	return n, interpretError(err)
}

func (t *txn) SettingSet(ctx context.Context, key, value string) error {
	t.batch.forget()
	_, err := t.exec(ctx, sqlSettingSet, key, value)
	return interpretError(err)
}

// SettingList reads the settings once per batch (batchCache).
func (t *txn) SettingList(ctx context.Context) (map[string]string, error) {
	if t.batch == nil {
		return t.reader.SettingList(ctx)
	}
	if t.batch.settings == nil {
		m, err := t.reader.SettingList(ctx)
		if err != nil {
			return nil, err
		}
		t.batch.settings = m
	}
	return maps.Clone(t.batch.settings), nil
}

// interpretError maps the engines' errors to store sentinels, once.
func interpretError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, sql.ErrNoRows):
		return store.ErrNotFound
	case errors.Is(err, sql.ErrConnDone), errors.Is(err, sql.ErrTxDone):
		return fmt.Errorf("%w: %v", store.ErrClosed, err)
	}
	// The two engines' words for a clash with a unique index: SQLite's
	// "UNIQUE constraint failed: agents.name", PostgreSQL's (SQLSTATE
	// 23505) `duplicate key value violates unique constraint
	// "agents_name_live"`.
	msg := err.Error()
	if strings.Contains(msg, "UNIQUE constraint failed") || strings.Contains(msg, "violates unique constraint") {
		switch {
		case strings.Contains(msg, "agents.name"), strings.Contains(msg, `"agents_name_live"`):
			return store.ErrNameTaken
		case strings.Contains(msg, "agents.wallet"), strings.Contains(msg, `"agents_wallet"`):
			return store.ErrWalletTaken
		}
	}
	if strings.Contains(msg, "database is closed") || strings.Contains(msg, "closed pool") {
		return fmt.Errorf("%w: %v", store.ErrClosed, err)
	}
	return fmt.Errorf("store: %w", err)
}

func (r reader) AgentPolicyList(ctx context.Context) ([]store.AgentPolicyRow, error) {
	rows, err := r.query(ctx, `SELECT id, stage, policy, deadline_at, requested_by FROM agents WHERE stage <> '' OR policy <> '' OR deadline_at <> 0 OR requested_by <> 0 ORDER BY id`)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	var out []store.AgentPolicyRow
	for rows.Next() {
		var p store.AgentPolicyRow
		var pol string
		var deadline int64
		if err := rows.Scan(&p.ID, &p.Stage, &pol, &deadline, &p.RequestedBy); err != nil {
			return nil, interpretError(err)
		}
		if pol != "" {
			p.Policy = []byte(pol)
		}
		p.DeadlineAt = unixTime(deadline)
		out = append(out, p)
	}
	return out, interpretError(rows.Err())
}

func (t *txn) SpendSetExhausted(ctx context.Context, id kin.AgentID, why string) error {
	t.forgetChains()
	if m := t.perm(); m != nil {
		m.drop(id)
	}
	_, err := t.exec(ctx, `INSERT INTO agent_spend (agent_id, exhausted) VALUES (?, ?)
		ON CONFLICT (agent_id) DO UPDATE SET exhausted = excluded.exhausted`, id, why)
	return interpretError(err)
}
