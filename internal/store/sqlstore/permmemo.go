package sqlstore

import (
	"sync"

	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/kin"
)

// The writer's permission rows, where this handle's writer is the
// database's only writer (Config.OnlyWriter) and reads are calls, not round
// trips (SQLite: no Dialect.HoldInserts, which has its own memory of chains,
// checked by the server: speculate.go).
//
// A registration reads its parent's permission chain in the writer's
// transaction (store.Tx.PermChain): on SQLite the recursive query cost 50
// to 73 µs of the writer's time for a one-row chain, about a third of the
// writer's time per registration, and the writer's time bounds how many
// registrations a second the store takes. The writer keeps each row it read
// there (permMemo), as the transaction sees it, and answers a chain whose
// rows it all holds from memory.
//
// What keeps it right: only this writer changes the database, and every
// write of a row a chain holds goes through the transaction's methods, which
// keep the memory as the transaction sees the database:
//
//   - a write of an agent's row (AgentUpdate, AgentUpdateStatus,
//     AgentUpdateMany, AgentUpdateSpawnBlock: txn.rowsWritten, before the
//     statement) drops that agent's row (an insert adds a row no chain
//     held: the memory holds only rows read);
//   - SpendSpawnAdd adds its spawn to each row held, as its statement does
//     to the table (one per id listed);
//   - SpendAdd drops the rows of the chain it adds to (its statement walks
//     the same links), or every row where the memory does not hold that
//     whole chain; SpendSetExhausted drops the agent's row;
//   - an Update undone (its savepoint rolled back, after it failed or its
//     RELEASE did) or a batch not committed forgets every row: what the
//     memory learnt from the undone writes is undone with them.
//
// A chain's first row carries the agent's whole row (PermRow.Agent): a row
// kept without it (read further up a chain) answers only as a later link.
type permMemo struct {
	mu   sync.Mutex
	rows map[kin.AgentID]store.PermRow
}

// maxPermMemo bounds the rows kept; past it they are all forgotten.
const maxPermMemo = 1 << 16

// maxMemoWalk bounds a walk up the memory: past it (a cycle in the rows,
// which the recursive query would not end either) the chain is read.
const maxMemoWalk = 1 << 12

func newPermMemo() *permMemo { return &permMemo{rows: map[kin.AgentID]store.PermRow{}} }

// chain is id's permission chain from memory, as sqlPermChain reads it
// (the first row with its agent, each further row without), and whether
// the memory holds all of it. The rows are the caller's own.
func (m *permMemo) chain(id kin.AgentID) ([]store.PermRow, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out, ok := m.walk(id)
	if !ok || out[0].Agent == nil {
		return nil, false
	}
	for i := 1; i < len(out); i++ {
		out[i].Agent = nil
	}
	return clonePermRows(out), true
}

// walk is the rows of id's chain the memory holds, up the links
// sqlPermChain follows, and whether it holds all of them (not when a link
// is missing, or past maxMemoWalk). m.mu is held.
func (m *permMemo) walk(id kin.AgentID) ([]store.PermRow, bool) {
	var out []store.PermRow
	for next := id; len(out) < maxMemoWalk; next = permNext(out[len(out)-1]) {
		r, ok := m.rows[next]
		if !ok {
			return nil, false
		}
		if out = append(out, r); r.Parent == 0 {
			return out, true
		}
	}
	return nil, false
}

// permNext is the next link after r (permParent).
func permNext(r store.PermRow) kin.AgentID {
	if r.RequestedBy != 0 {
		return r.RequestedBy
	}
	return r.Parent
}

// put keeps the rows of a chain just read in the transaction. A row kept
// with its agent keeps it when read again further up a chain: no write of
// the agent's row came in between (it would have dropped the row).
func (m *permMemo) put(rows []store.PermRow) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.rows)+len(rows) > maxPermMemo {
		m.rows = map[kin.AgentID]store.PermRow{}
	}
	for i, r := range clonePermRows(rows) {
		if old, ok := m.rows[r.ID]; ok && i > 0 && old.Agent != nil {
			r.Agent = old.Agent
		}
		m.rows[r.ID] = r
	}
}

// drop forgets the rows of ids.
func (m *permMemo) drop(ids ...kin.AgentID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, id := range ids {
		delete(m.rows, id)
	}
}

// spawned adds one spawn to the row of each id held (SpendSpawnAdd).
func (m *permMemo) spawned(ids []kin.AgentID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, id := range ids {
		if r, ok := m.rows[id]; ok {
			r.Spend.Spawns++
			m.rows[id] = r
		}
	}
}

// spent forgets the rows SpendAdd on id changes: id's chain as the memory
// holds it, or every row where it does not hold all of it.
func (m *permMemo) spent(id kin.AgentID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	links, ok := m.walk(id)
	if !ok {
		m.rows = map[kin.AgentID]store.PermRow{}
		return
	}
	for _, l := range links {
		delete(m.rows, l.ID)
	}
}

// forget forgets every row.
func (m *permMemo) forget() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rows = map[kin.AgentID]store.PermRow{}
}

// forgetPerm forgets the writer's permission rows, where it keeps them.
func (s *stmts) forgetPerm() {
	if s != nil && s.perm != nil {
		s.perm.forget()
	}
}

// perm is the writer's permission rows where t keeps them, else nil.
func (t *txn) perm() *permMemo {
	if t.st == nil {
		return nil
	}
	return t.st.perm
}
