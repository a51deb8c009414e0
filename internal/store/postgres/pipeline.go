package postgres

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/kin-agents/kin/internal/store/sqlstore"
)

// The writer's savepoints, and a deferrable Update's agent insert, ride
// with the next statement.
//
// Every Update of a batch runs in its own savepoint (sqlstore): before its
// first statement the writer sends "RELEASE SAVEPOINT u; SAVEPOINT u" (or
// "SAVEPOINT u" for the first), a round trip to the server of its own that
// needs no answer but "done". The writer's connection is wrapped so that
// such a statement is held, and sent with the statement that follows it in
// one pipeline (pgx's batch: all queued, one round trip), its error, if
// any, being that statement's: one round trip fewer an Update (the
// benchmark's registration, the parent's chain and the insert, took three
// and takes two). A deferrable Update's agent insert (its statement's
// context carries a sqlstore.Held) is held the same way, behind the
// savepoints before it, and goes with the next statement: the next
// Update's savepoint and first read, the batch's events, or the writer's
// flush (sqlstore.FlushSQL); its outcome is reported on its Held, and one
// that failed makes the writer undo and run again its Update and those
// after it (sqlstore's held.go). A registration then takes one round trip.
// Anything else that follows what is held (a statement without arguments,
// a ROLLBACK TO, a statement without the pipeline's support) first sends it
// on its own, so the server sees the same statements in the same order.

// savepointStatements are the statements held for the next one, each as
// the pipeline sends it (one statement a query: the extended protocol's
// rule).
var savepointStatements = map[string][]string{
	sqlstore.SavepointSQL:        {sqlstore.SavepointSQL},
	sqlstore.ReleaseSavepointSQL: {sqlstore.ReleaseSQL, sqlstore.SavepointSQL},
}

// pipelineConnector opens the writer's connections, each wrapped, all
// counting their round trips to the server in trips (nil: not counted).
type pipelineConnector struct {
	driver.Connector
	trips *atomic.Int64
}

func (c pipelineConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	sc, ok := conn.(*stdlib.Conn)
	if !ok {
		conn.Close()
		return nil, fmt.Errorf("postgres: the writer's connection is a %T, not pgx's", conn)
	}
	return &pipelineConn{Conn: sc, trips: c.trips}, nil
}

// heldStatement is a statement not yet sent.
type heldStatement struct {
	sql  string
	args []any          // nil: none (a savepoint's, the BEGIN's)
	held *sqlstore.Held // a held write's, told its outcome; nil: a savepoint's, the BEGIN's, or one sqlstore.Ahead
}

// beginSQL is the held BEGIN of a transaction: sent with its first
// statement.
const beginSQL = "BEGIN"

// pipelineConn is pgx's database/sql connection with the held statements.
// database/sql uses a connection from one goroutine at a time.
type pipelineConn struct {
	*stdlib.Conn
	held []heldStatement // not yet sent, to go first with the next
	// unsure: a held savepoint statement failed, or was never sent (the
	// batch failed before it), so the savepoints are not where the writer
	// thinks: a ROLLBACK TO would roll back to an earlier Update's
	// savepoint, undoing writes already reported done. It is refused
	// until the transaction ends (the writer then fails its batch).
	unsure bool
	// failed: a held write failed (every savepoint sent before it was
	// made): the transaction is aborted, and savepoint u is the failed
	// write's Update's. Only the writer's ROLLBACK TO that knows it
	// (sqlstore.Recovering) is sent until then.
	failed bool
	// committed: the writer's COMMIT (sqlstore.CommitSQL) was run: the
	// transaction's Commit only ends it.
	committed bool
	trips     *atomic.Int64 // round trips to the server, for benchmarks; nil: not counted
}

// trip counts a round trip to the server.
func (c *pipelineConn) trip() {
	if c.trips != nil {
		c.trips.Add(1)
	}
}

var (
	_ driver.ExecerContext      = (*pipelineConn)(nil)
	_ driver.QueryerContext     = (*pipelineConn)(nil)
	_ driver.ConnBeginTx        = (*pipelineConn)(nil)
	_ driver.NamedValueChecker  = (*pipelineConn)(nil)
	_ driver.SessionResetter    = (*pipelineConn)(nil)
	_ driver.ConnPrepareContext = (*pipelineConn)(nil)
)

// errHeldFailed is what a statement sent after a held write that failed
// returns: its own failure is void, the writer runs its Update again.
var errHeldFailed = errors.New("postgres: a write held from an earlier statement failed, so this one was not run")

// flush sends what is held, alone.
func (c *pipelineConn) flush(ctx context.Context) error {
	if len(c.held) == 0 {
		return nil
	}
	if !c.holdsArgs() {
		// Savepoints (and a BEGIN) alone, without arguments: pgx sends
		// them as one simple query, every statement, one round trip.
		qs := make([]string, len(c.held))
		for i, h := range c.held {
			qs[i] = h.sql
		}
		c.held = c.held[:0]
		c.trip()
		if _, err := c.Conn.Conn().Exec(ctx, strings.Join(qs, "; ")); err != nil {
			c.unsure = true
			return err
		}
		return nil
	}
	br, sent := c.send(ctx, "", nil)
	defer br.Close()
	return c.heldResults(br, sent)
}

// holdsArgs reports whether a statement with arguments (a held write, one
// sent ahead) is among what is held.
func (c *pipelineConn) holdsArgs() bool {
	for _, h := range c.held {
		if h.args != nil {
			return true
		}
	}
	return false
}

// batchable reports whether a statement can go in a pipeline with what is
// held: one with arguments, or one without that is a single statement
// (pgx sends a statement without arguments alone as a simple query, which
// may hold several).
func batchable(query string, args []driver.NamedValue) bool {
	return len(args) > 0 || !strings.Contains(query, ";")
}

// errCommitted refuses a statement after the writer's COMMIT.
var errCommitted = errors.New("postgres: the transaction was committed: nothing more runs in it")

func (c *pipelineConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	if c.committed {
		return nil, errCommitted
	}
	if query == sqlstore.RollbackToSQL {
		switch recovering := sqlstore.Recovering(ctx); {
		case c.unsure:
			return nil, errors.New("postgres: a savepoint sent ahead of a statement failed or was not sent: the transaction's savepoints are unknown, so nothing is rolled back to one")
		case c.failed != recovering:
			if c.failed {
				return nil, errors.New("postgres: a held write failed: a ROLLBACK TO that does not know it would not undo what it thinks")
			}
			return nil, errors.New("postgres: a ROLLBACK TO after a held write failed, but none failed")
		case recovering:
			// What followed the failed write was not run: nothing
			// held is left to send.
			c.held, c.failed = c.held[:0], false
			c.trip()
			return c.Conn.ExecContext(ctx, query, args)
		}
	}
	if h := sqlstore.HoldOf(ctx); h != nil {
		vals := make([]any, len(args))
		for i, a := range args {
			vals[i] = a.Value
		}
		c.held = append(c.held, heldStatement{sql: query, args: vals, held: h})
		return driver.RowsAffected(1), nil
	}
	if sqlstore.IsAhead(ctx) && batchable(query, args) {
		vals := make([]any, len(args))
		for i, a := range args {
			vals[i] = a.Value
		}
		c.held = append(c.held, heldStatement{sql: query, args: vals})
		return driver.RowsAffected(0), nil
	}
	if len(args) == 0 {
		if qs, ok := savepointStatements[query]; ok {
			for _, q := range qs {
				c.held = append(c.held, heldStatement{sql: q})
			}
			return driver.RowsAffected(0), nil
		}
		if query == sqlstore.FlushSQL && len(c.held) > 0 {
			return driver.RowsAffected(0), c.flush(ctx)
		}
		if query == sqlstore.CommitSQL {
			return driver.RowsAffected(0), c.commit(ctx)
		}
	}
	if len(c.held) == 0 || !batchable(query, args) {
		if err := c.flush(ctx); err != nil {
			return nil, err
		}
		c.trip()
		return c.Conn.ExecContext(ctx, query, args)
	}
	br, sent := c.send(ctx, query, args)
	defer br.Close()
	if err := c.heldResults(br, sent); err != nil {
		return nil, err
	}
	tag, err := br.Exec()
	if err != nil {
		return nil, err
	}
	return driver.RowsAffected(tag.RowsAffected()), nil
}

func (c *pipelineConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	if c.committed {
		return nil, errCommitted
	}
	if len(c.held) == 0 || !batchable(query, args) {
		if err := c.flush(ctx); err != nil {
			return nil, err
		}
		c.trip()
		return c.Conn.QueryContext(ctx, query, args)
	}
	br, sent := c.send(ctx, query, args)
	if err := c.heldResults(br, sent); err != nil {
		br.Close()
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		br.Close()
		return nil, err
	}
	return &pipelineRows{rows: rows, batch: br}, nil
}

// send queues what is held and query (none when ""), and sends them in
// one round trip. sent is what was held, in order.
func (c *pipelineConn) send(ctx context.Context, query string, args []driver.NamedValue) (br pgx.BatchResults, sent []heldStatement) {
	b := &pgx.Batch{}
	for _, h := range c.held {
		b.Queue(h.sql, h.args...)
	}
	sent = c.held
	c.held = nil
	if query != "" {
		vals := make([]any, len(args))
		for i, a := range args {
			vals[i] = a.Value
		}
		b.Queue(query, vals...)
	}
	c.trip()
	return c.Conn.Conn().SendBatch(ctx, b), sent
}

// heldResults reads the results of what was held and sent: each held
// write learns its outcome. The first error is also the statement's that
// followed them: a savepoint's (the BEGIN's, one sent ahead) leaves c
// unsure, a held write's failed (and the statement's error is
// errHeldFailed).
func (c *pipelineConn) heldResults(br pgx.BatchResults, sent []heldStatement) error {
	for i, h := range sent {
		_, err := br.Exec()
		if err == nil {
			if h.held != nil {
				h.held.Ran(nil)
			}
			continue
		}
		for _, later := range sent[i+1:] {
			if later.held != nil {
				later.held.Ran(sqlstore.ErrHeldNotRun)
			}
		}
		if h.held == nil {
			c.unsure = true
			return err
		}
		h.held.Ran(err)
		c.failed = true
		return fmt.Errorf("%w: %v", errHeldFailed, err)
	}
	return nil
}

// BeginTx holds the BEGIN for the transaction's first statement: the
// writer's batch sends it with its write lock and its first read (the
// log's size) in one round trip.
func (c *pipelineConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if c.Conn.Conn().IsClosed() {
		return nil, driver.ErrBadConn
	}
	if opts.Isolation != driver.IsolationLevel(sql.LevelDefault) || opts.ReadOnly {
		return nil, errors.New("postgres: the writer's connection begins only read-write transactions at the default isolation level")
	}
	if err := c.flush(ctx); err != nil {
		return nil, err
	}
	c.reset()
	c.held = append(c.held, heldStatement{sql: beginSQL})
	return &pipelineTx{c: c}, nil
}

// commit is the writer's COMMIT (sqlstore.CommitSQL): sent with what is
// held, in one round trip. Should a held statement fail, the server runs
// nothing after it (the pipeline's one Sync comes after the COMMIT): the
// COMMIT is not run, and its error is the failed statement's (a held
// write's told on its Held). A COMMIT the server turned into a ROLLBACK
// (the transaction had failed) is an error too.
func (c *pipelineConn) commit(ctx context.Context) error {
	switch {
	case c.unsure:
		return errors.New("postgres: a statement sent ahead of another failed or was not sent: the transaction is not committed")
	case c.failed:
		return errors.New("postgres: a held write failed: the transaction is not committed")
	}
	br, sent := c.send(ctx, sqlstore.CommitSQL, nil)
	defer br.Close()
	if err := c.heldResults(br, sent); err != nil {
		return err
	}
	tag, err := br.Exec()
	if err != nil {
		return err
	}
	if tag.String() != "COMMIT" {
		return fmt.Errorf("postgres: the transaction had failed: its COMMIT was a %s", tag.String())
	}
	c.committed = true
	return nil
}

func (c *pipelineConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	if err := c.flush(ctx); err != nil {
		return nil, err
	}
	c.trip()
	return c.Conn.PrepareContext(ctx, query)
}

func (c *pipelineConn) ResetSession(ctx context.Context) error {
	c.reset() // a connection handed out again starts clean
	return c.Conn.ResetSession(ctx)
}

// reset forgets what is held, and what went wrong: a transaction ended.
// A held write never sent is told so.
func (c *pipelineConn) reset() {
	for _, h := range c.held {
		if h.held != nil {
			h.held.Ran(sqlstore.ErrHeldNotRun)
		}
	}
	c.held, c.unsure, c.failed, c.committed = nil, false, false, false
}

// pipelineTx ends a transaction after what is held. Commit after the
// writer's COMMIT (commit) only ends it; otherwise it sends what is held
// and the COMMIT in one round trip (the writer ends its batches with its
// own COMMIT, so that it can run again the Update of a held write that
// failed), and rolls back should anything before the COMMIT fail. A
// ROLLBACK undoes all: a transaction whose BEGIN is still held was never
// sent, and needs none.
type pipelineTx struct {
	c *pipelineConn
}

func (t *pipelineTx) Commit() error {
	c := t.c
	if c.committed {
		c.reset()
		return nil
	}
	err := c.commit(context.Background())
	if err == nil {
		c.reset()
		return nil
	}
	if rerr := t.Rollback(); rerr != nil {
		err = errors.Join(err, rerr)
	}
	return err
}

func (t *pipelineTx) Rollback() error {
	c := t.c
	unsent := len(c.held) > 0 && c.held[0].sql == beginSQL && c.held[0].args == nil
	committed := c.committed
	c.reset()
	if committed {
		return errors.New("postgres: the transaction was committed: nothing to roll back")
	}
	pc := c.Conn.Conn()
	if unsent || pc.IsClosed() || pc.PgConn().TxStatus() == 'I' {
		return nil // nothing reached the server, or the transaction ended there
	}
	c.trip()
	if _, err := pc.Exec(context.Background(), "ROLLBACK"); err != nil {
		// The connection is in a state nobody knows: drop it (pgx's
		// own transactions do the same).
		pc.Close(context.Background())
		return err
	}
	return nil
}

// pipelineRows are a batched query's rows as database/sql reads them:
// each value as one of driver.Value's types.
type pipelineRows struct {
	rows  pgx.Rows
	batch pgx.BatchResults
	cols  []string
}

func (r *pipelineRows) Columns() []string {
	if r.cols == nil {
		fds := r.rows.FieldDescriptions()
		r.cols = make([]string, len(fds))
		for i, fd := range fds {
			r.cols[i] = fd.Name
		}
	}
	return r.cols
}

func (r *pipelineRows) Close() error {
	r.rows.Close()
	err := r.rows.Err()
	if berr := r.batch.Close(); err == nil {
		err = berr
	}
	return err
}

func (r *pipelineRows) Next(dest []driver.Value) error {
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return io.EOF
	}
	vals, err := r.rows.Values()
	if err != nil {
		return err
	}
	for i, v := range vals {
		if dest[i], err = driverValue(v); err != nil {
			return fmt.Errorf("column %s: %w", r.Columns()[i], err)
		}
	}
	return nil
}

// driverValue is v, as pgx decoded it, as one of driver.Value's types.
func driverValue(v any) (driver.Value, error) {
	switch v := v.(type) {
	case nil, int64, float64, bool, []byte, string, time.Time:
		return v, nil
	case int32:
		return int64(v), nil
	case int16:
		return int64(v), nil
	case int8:
		return int64(v), nil
	case float32:
		return float64(v), nil
	case driver.Valuer:
		return v.Value()
	}
	return nil, errors.New("postgres: a value of type " + strings.TrimPrefix(fmt.Sprintf("%T", v), "*") + " the writer's pipeline does not read")
}
