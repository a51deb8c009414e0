package postgres

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/kin-agents/kin/internal/store/sqlstore"
)

// The writer's savepoints ride with the next statement.
//
// Every Update of a batch runs in its own savepoint (sqlstore): before its
// first statement the writer sends "RELEASE SAVEPOINT u; SAVEPOINT u" (or
// "SAVEPOINT u" for the first), a round trip to the server of its own that
// needs no answer but "done". The writer's connection is wrapped so that
// such a statement is held, and sent with the statement that follows it in
// one pipeline (pgx's batch: both queued, one round trip), its error, if
// any, being that statement's: one round trip fewer an Update (the
// benchmark's registration, the parent's chain and the insert, took three
// and takes two). Anything else that follows a held savepoint (a ROLLBACK TO, the
// COMMIT, a statement without the pipeline's support) first sends it on
// its own, so the server sees the same statements in the same order.

// savepointStatements are the statements held for the next one, each as
// the pipeline sends it (one statement a query: the extended protocol's
// rule).
var savepointStatements = map[string][]string{
	sqlstore.SavepointSQL:        {sqlstore.SavepointSQL},
	sqlstore.ReleaseSavepointSQL: {sqlstore.ReleaseSQL, sqlstore.SavepointSQL},
}

// pipelineConnector opens the writer's connections, each wrapped.
type pipelineConnector struct{ driver.Connector }

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
	return &pipelineConn{Conn: sc}, nil
}

// pipelineConn is pgx's database/sql connection with the held savepoint.
// database/sql uses a connection from one goroutine at a time.
type pipelineConn struct {
	*stdlib.Conn
	held    []string // statements not yet sent, to go first with the next
	heldSQL string   // the same as the writer sent it: one string, one round trip when sent alone
	// unsure: a held statement failed, or was never sent (the batch
	// failed before it), so the savepoints are not where the writer
	// thinks: a ROLLBACK TO would roll back to an earlier Update's
	// savepoint, undoing writes already reported done. It is refused
	// until the transaction ends (the writer then fails its batch).
	unsure bool
}

var (
	_ driver.ExecerContext      = (*pipelineConn)(nil)
	_ driver.QueryerContext     = (*pipelineConn)(nil)
	_ driver.ConnBeginTx        = (*pipelineConn)(nil)
	_ driver.NamedValueChecker  = (*pipelineConn)(nil)
	_ driver.SessionResetter    = (*pipelineConn)(nil)
	_ driver.ConnPrepareContext = (*pipelineConn)(nil)
)

// flush sends what is held, alone.
func (c *pipelineConn) flush(ctx context.Context) error {
	if len(c.held) == 0 {
		return nil
	}
	q := c.heldSQL
	c.held, c.heldSQL = nil, ""
	// Without arguments pgx sends it as a simple query: both statements,
	// one round trip.
	if _, err := c.Conn.Conn().Exec(ctx, q); err != nil {
		c.unsure = true
		return err
	}
	return nil
}

func (c *pipelineConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	if query == sqlstore.RollbackToSQL && c.unsure {
		return nil, errors.New("postgres: a savepoint sent ahead of a statement failed or was not sent: the transaction's savepoints are unknown, so nothing is rolled back to one")
	}
	if len(args) == 0 {
		if qs, ok := savepointStatements[query]; ok && len(c.held) == 0 {
			c.held, c.heldSQL = qs, query
			return driver.RowsAffected(0), nil
		}
	}
	if len(c.held) == 0 || len(args) == 0 {
		if err := c.flush(ctx); err != nil {
			return nil, err
		}
		return c.Conn.ExecContext(ctx, query, args)
	}
	br, n := c.send(ctx, query, args)
	defer br.Close()
	if err := c.heldResults(br, n); err != nil {
		return nil, err
	}
	tag, err := br.Exec()
	if err != nil {
		return nil, err
	}
	return driver.RowsAffected(tag.RowsAffected()), nil
}

func (c *pipelineConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	if len(c.held) == 0 || len(args) == 0 {
		if err := c.flush(ctx); err != nil {
			return nil, err
		}
		return c.Conn.QueryContext(ctx, query, args)
	}
	br, n := c.send(ctx, query, args)
	if err := c.heldResults(br, n); err != nil {
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

// send queues what is held (n statements) and query, and sends them in
// one round trip.
func (c *pipelineConn) send(ctx context.Context, query string, args []driver.NamedValue) (br pgx.BatchResults, n int) {
	b := &pgx.Batch{}
	for _, q := range c.held {
		b.Queue(q)
	}
	n = len(c.held)
	c.held, c.heldSQL = nil, ""
	vals := make([]any, len(args))
	for i, a := range args {
		vals[i] = a.Value
	}
	b.Queue(query, vals...)
	return c.Conn.Conn().SendBatch(ctx, b), n
}

// heldResults reads the n held statements' results: the first error is
// the statement's that followed them (and leaves c unsure).
func (c *pipelineConn) heldResults(br pgx.BatchResults, n int) error {
	for range n {
		if _, err := br.Exec(); err != nil {
			c.unsure = true
			return err
		}
	}
	return nil
}

func (c *pipelineConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if err := c.flush(ctx); err != nil {
		return nil, err
	}
	tx, err := c.Conn.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &pipelineTx{Tx: tx, c: c}, nil
}

func (c *pipelineConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	if err := c.flush(ctx); err != nil {
		return nil, err
	}
	return c.Conn.PrepareContext(ctx, query)
}

func (c *pipelineConn) ResetSession(ctx context.Context) error {
	c.held, c.heldSQL, c.unsure = nil, "", false // a connection handed out again starts clean
	return c.Conn.ResetSession(ctx)
}

// pipelineTx ends a transaction after what is held: a COMMIT releases
// every savepoint anyway, so a held RELEASE/SAVEPOINT pair before it is
// dropped; a ROLLBACK undoes it.
type pipelineTx struct {
	driver.Tx
	c *pipelineConn
}

func (t *pipelineTx) Commit() error {
	t.c.held, t.c.heldSQL, t.c.unsure = nil, "", false
	return t.Tx.Commit()
}

func (t *pipelineTx) Rollback() error {
	t.c.held, t.c.heldSQL, t.c.unsure = nil, "", false
	return t.Tx.Rollback()
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
