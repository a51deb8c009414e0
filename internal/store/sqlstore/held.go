package sqlstore

import (
	"context"
	"database/sql"
	"errors"
)

// Held writes: a deferrable Update's insert sent with the next statement.
//
// Where each statement is a round trip to a server (Dialect.HoldInserts), a
// registration's insert needs no answer but "done": its id is assigned
// here (the batch's largest plus one, read under the write lock with the
// log's size) and the statement is handed to the writer's connection to
// hold and send with the next statement (the next Update's savepoint and
// first read, or the batch's events, or a flush), in one round trip. Only
// an Update whose function is re-runnable (store.Deferrer) is deferred so,
// and only such Updates run while a held write is unanswered: before any
// other Update, the writer flushes what is held.
//
// A held write that fails (the name was taken: the unique index says so)
// aborts what was sent after it. The driver records the failure on the
// write's Held; the writer then rolls back to the failed Update's savepoint
// (the last one the server made: the savepoints sent after the write were
// not run), restores the batch as it was before that Update (the tree, the
// size, the events, the largest id), runs that Update again with its insert
// done at once (it now sees the clash as ErrNameTaken), and then the
// Updates after it, whose statements the failure aborted.

// Held is one held write, as the writer tracks it and the driver reports
// it.
type Held struct {
	update int   // the index in its batch of the Update that wrote it
	done   bool  // the driver reported it
	err    error // its failure, or ErrHeldNotRun
}

// ErrHeldNotRun is a held write's outcome when an earlier statement of the
// same round trip failed, so the server did not run it.
var ErrHeldNotRun = errors.New("a statement sent ahead of it failed: not run")

// Ran records the held write's outcome: nil when the server ran it.
func (h *Held) Ran(err error) { h.done, h.err = true, err }

// heldKey is the context key a held write's statement carries its Held
// under.
type heldKey struct{}

// HoldOf returns the Held a statement's context carries: the driver holds
// the statement and sends it with the next, reporting its outcome there
// (Ran). Nil: run it now.
func HoldOf(ctx context.Context) *Held {
	h, _ := ctx.Value(heldKey{}).(*Held)
	return h
}

// Hold is ctx carrying h: a statement run with it is held (HoldOf).
func Hold(ctx context.Context, h *Held) context.Context {
	return context.WithValue(ctx, heldKey{}, h)
}

// Outcome is what the driver reported: done once it did, err the held
// write's failure (or ErrHeldNotRun).
func (h *Held) Outcome() (done bool, err error) { return h.done, h.err }

// recoverKey marks the writer's ROLLBACK TO after a held write failed.
type recoverKey struct{}

// Recovering reports whether a ROLLBACK TO statement's context says the
// writer knows a held write failed and rolls back to its Update's
// savepoint: the driver refuses any other ROLLBACK TO while a held write's
// failure is unanswered, and this one otherwise.
func Recovering(ctx context.Context) bool {
	v, _ := ctx.Value(recoverKey{}).(bool)
	return v
}

// Recover is ctx marked as the writer's ROLLBACK TO after a held write
// failed (Recovering).
func Recover(ctx context.Context) context.Context {
	return context.WithValue(ctx, recoverKey{}, true)
}

// aheadKey marks a statement that needs no answer but "done".
type aheadKey struct{}

// Ahead is ctx marking a statement that needs no answer but "done": a
// driver that holds statements (Dialect.CommitInTx) may hold it and send
// it with the next one, and should it fail, that next statement fails
// with its error and is not run (the transaction is then aborted). The
// writer marks so the batch's events (sent with its COMMIT), PostgreSQL's
// begin its write lock (sent with the first read).
func Ahead(ctx context.Context) context.Context {
	return context.WithValue(ctx, aheadKey{}, true)
}

// IsAhead reports whether a statement's context says it may be held for
// the next (Ahead).
func IsAhead(ctx context.Context) bool {
	v, _ := ctx.Value(aheadKey{}).(bool)
	return v
}

// CommitSQL ends a batch where the driver commits in one round trip with
// what it holds (Dialect.CommitInTx): run in the transaction, it sends the
// held statements and the COMMIT together; should one of them fail, the
// COMMIT is not run, the transaction is left as that failure left it (a
// held write's failure is undone as anywhere else: held.go), and the
// statement fails. The transaction's Commit then only ends it.
const CommitSQL = "COMMIT"

// FlushSQL sends what the writer's connection holds: a statement of its
// own where nothing is held (a driver that holds writes sends them instead
// of it).
const FlushSQL = "SELECT 1"

// heldWrites are a batch's held writes the driver has not yet confirmed,
// in the order they were sent.
type heldWrites []*Held

// failed returns the index of the Update whose held write failed (or was
// not run), and drops those the driver confirmed.
func (w *heldWrites) failed() (int, bool) {
	for _, h := range *w {
		if h.done && h.err != nil {
			return h.update, true
		}
	}
	n := 0
	for n < len(*w) && (*w)[n].done {
		n++
	}
	*w = append((*w)[:0], (*w)[n:]...)
	return 0, false
}

// execHeld runs a write whose result is not read: in a deferred Update
// held for the next statement and tracked (the Update is run again should
// it fail), at once otherwise.
func (t *txn) execHeld(ctx context.Context, q string, args ...any) (sql.Result, error) {
	if t.held == nil {
		return t.exec(ctx, q, args...)
	}
	h := &Held{update: t.update}
	res, err := t.exec(Hold(ctx, h), q, args...)
	if err == nil {
		*t.held = append(*t.held, h)
	}
	return res, err
}
