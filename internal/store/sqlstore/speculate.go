package sqlstore

import (
	"context"
	"slices"
	"strings"
	"sync"

	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/kin"
)

// A deferrable Update's permission chain taken on trust, and checked by
// the server with the next statement (Dialect.HoldInserts and Lateral).
//
// A registration reads its parent's chain in the writer's transaction
// (store.PermChain): on a server, a round trip while the writer holds the
// write lock, once per registration, whoever else wrote. The writer
// remembers, by agent, the last chain it read there (chainMemo), with the
// server's own text of its rows. In a deferrable Update (store.Deferrer:
// re-runnable) a chain it remembers is answered from memory at once, and a
// check is held (held.go) to go with the next statement: the same walk,
// its rows as text compared with the remembered text, failing (a division
// by zero) unless they are the same. It runs at the place in the
// transaction where the read would have run, so it sees exactly what the
// read would have seen: every earlier Update's writes, and every other
// handle's commits before the batch took the write lock. A check that
// fails is a held write that failed: the writer rolls back to that
// Update's savepoint and runs it again with its statements sent at once
// (so the chain is read), and the Updates after it. So what a
// registration decides on is what the store holds, as before; the memory
// only saves the round trip when it is right. The rows' text is the
// server's (a record's output, which quotes each field, with the depth),
// so equal text is equal values, floats included.
//
// What this handle's own writes change in a chain that registrations
// count (spend and spawn counters) forgets the memory, so that budgets do
// not make every check fail; anything else (another host's writes, a
// promotion) is left to the check.

// maxChains bounds the chains the writer remembers; past it they are all
// forgotten.
const maxChains = 1024

// chainMemo is the chains the writer read in its transactions, by the
// agent asked for.
type chainMemo struct {
	mu sync.Mutex
	m  map[kin.AgentID]chainEntry
}

type chainEntry struct {
	rows []store.PermRow
	text string // the server's text of the rows, as sqlPermChainCheck compares it
}

func (c *chainMemo) get(id kin.AgentID) (chainEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[id]
	return e, ok
}

func (c *chainMemo) put(id kin.AgentID, e chainEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxChains {
		c.m = map[kin.AgentID]chainEntry{}
	}
	c.m[id] = e
}

func (c *chainMemo) drop(id kin.AgentID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, id)
}

func (c *chainMemo) forget() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m = nil
}

// permChainRows is PermChain's LATERAL form (lateral.go) with each row's
// depth, named columns, for the signed read and its check.
var permChainRows = `
		WITH RECURSIVE up(id, depth) AS (
			SELECT CAST(? AS BIGINT), 0
			UNION ALL
			SELECT (SELECT ` + permParent + ` FROM agents a WHERE a.id = up.id AND a.parent_id <> 0), up.depth + 1
			FROM up WHERE up.id IS NOT NULL
		)
		SELECT up.depth AS depth, CASE WHEN up.depth = 0 THEN ` + agentColumns + ` ELSE '' END AS packed,
			a.id AS id, a.parent_id AS parent_id, a.requested_by AS requested_by, a.role AS role, a.stage AS stage,
			a.policy AS policy, a.deadline_at AS deadline_at,
			COALESCE(s.tokens, 0) AS tokens, COALESCE(s.cost, 0) AS cost, COALESCE(s.sub_tokens, 0) AS sub_tokens,
			COALESCE(s.sub_cost, 0) AS sub_cost, COALESCE(s.spawns, 0) AS spawns, COALESCE(s.exhausted, '') AS exhausted
		FROM up CROSS JOIN LATERAL (SELECT * FROM agents a WHERE a.id = up.id OFFSET 0) a
			LEFT JOIN LATERAL (SELECT * FROM agent_spend s WHERE s.agent_id = a.id OFFSET 0) s ON true`

// sqlPermChainSigned is PermChain's query with each row's text last.
var sqlPermChainSigned = `SELECT c.packed, c.id, c.parent_id, c.requested_by, c.role, c.stage, c.policy, c.deadline_at,
		c.tokens, c.cost, c.sub_tokens, c.sub_cost, c.spawns, c.exhausted, c.depth, CAST(c AS TEXT)
	FROM (` + permChainRows + `) c ORDER BY c.depth`

// sqlPermChainCheck fails (division by zero) unless the chain's rows, as
// text joined by commas, are the second argument.
var sqlPermChainCheck = `SELECT 1 / CASE WHEN (SELECT string_agg(CAST(c AS TEXT), ',' ORDER BY c.depth) FROM (` + permChainRows + `) c) = CAST(? AS TEXT) THEN 1 ELSE 0 END`

// speculates reports whether t's chains are remembered and checked.
func (t *txn) speculates() bool {
	return t.d != nil && t.d.HoldInserts && t.d.Lateral && t.st != nil && t.top != nil
}

// PermChain is the reader's, except on a server where the writer
// remembers chains (above).
func (t *txn) PermChain(ctx context.Context, id kin.AgentID) ([]store.PermRow, error) {
	if m := t.perm(); m != nil {
		if rows, ok := m.chain(id); ok {
			return rows, nil
		}
		rows, err := t.reader.PermChain(ctx, id)
		if err == nil && len(rows) > 0 {
			m.put(rows)
		}
		return rows, err
	}
	if !t.speculates() || t.counted {
		return t.reader.PermChain(ctx, id)
	}
	if t.held != nil {
		if e, ok := t.st.chains.get(id); ok {
			if _, err := t.execHeld(ctx, sqlPermChainCheck, id, e.text); err != nil {
				return nil, interpretError(err)
			}
			return clonePermRows(e.rows), nil
		}
	}
	rows, texts, err := t.reader.permChain(ctx, sqlPermChainSigned, id, true)
	if err != nil {
		return nil, err
	}
	if len(rows) > 0 {
		t.st.chains.put(id, chainEntry{rows: clonePermRows(rows), text: strings.Join(texts, ",")})
	}
	return rows, nil
}

// forgetChains forgets the remembered chains: this handle wrote counters
// a chain holds.
func (t *txn) forgetChains() {
	if t.speculates() {
		t.counted = true
		t.st.chains.forget()
	}
}

// forgetStage forgets every remembered chain: this handle changed an
// agent's stage, which the chains below it hold (a promotion: rare).
func (t *txn) forgetStage() {
	if t.speculates() {
		t.st.chains.forget()
	}
}

// forgetChain forgets id's remembered chain: this handle wrote id's row,
// which the chain holds whole (its first row), so its check would fail.
// The chains of id's descendants hold only what id's row says of
// permissions (stage: forgetStage; policy and deadline, which no update
// changes once registered; a change another handle makes, its check
// finds).
func (t *txn) forgetChain(id kin.AgentID) {
	if t.speculates() {
		t.st.chains.drop(id)
	}
}

// clonePermRows is a copy of rows that shares nothing a caller could
// change.
func clonePermRows(rows []store.PermRow) []store.PermRow {
	out := slices.Clone(rows)
	for i := range out {
		if a := out[i].Agent; a != nil {
			c := *a
			c.Command = slices.Clone(a.Command)
			if a.Exit != nil {
				x := *a.Exit
				c.Exit = &x
			}
			out[i].Agent = &c
		}
		out[i].Policy = slices.Clone(out[i].Policy)
	}
	return out
}
