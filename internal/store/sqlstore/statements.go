package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"

	"github.com/kin-agents/kin/kin"
)

// The store's hot SQL. database/sql with modernc.org/sqlite compiles a
// statement on every call unless it is prepared, and compiling was a
// quarter of the writer's time; these are prepared once.
var (
	sqlAgentByID      = `SELECT ` + agentColumns + ` FROM agents a WHERE id = ?`
	sqlAgentAncestors = `
		WITH RECURSIVE chain(id, depth) AS (
			SELECT id, 0 FROM agents WHERE id = ?
			UNION ALL
			SELECT a.parent_id, c.depth + 1 FROM agents a JOIN chain c ON a.id = c.id WHERE a.parent_id <> 0
		)
		SELECT ` + agentColumns + ` FROM chain c JOIN agents a ON a.id = c.id ORDER BY c.depth`
	sqlAgentSubtree = `
		WITH RECURSIVE sub(id) AS (
			SELECT id FROM agents WHERE id = ?
			UNION ALL
			SELECT a.id FROM agents a JOIN sub s ON a.parent_id = s.id
		)
		SELECT ` + agentColumns + ` FROM sub s JOIN agents a ON a.id = s.id`
	sqlAgentListByIDs    = `SELECT ` + agentColumns + ` FROM agents a WHERE a.id IN (SELECT value FROM json_each(?))`
	sqlAgentLeanByIDs    = `SELECT ` + agentLeanColumns + ` FROM agents a WHERE a.id IN (SELECT value FROM json_each(?))`
	sqlAgentRowsByIDs    = `SELECT ` + agentColumns + ` FROM agents a WHERE a.id IN (SELECT value FROM json_each(?)) ORDER BY a.id`
	sqlAgentByParents    = `SELECT ` + agentColumns + ` FROM agents a WHERE a.parent_id IN (SELECT value FROM json_each(?)) ORDER BY a.id`
	sqlAgentLiveByName   = `SELECT ` + agentColumns + ` FROM agents a WHERE name = ? AND status <> 'terminated'`
	sqlAgentWalletExists = `SELECT COUNT(*) FROM agents WHERE wallet = ?`
	// The next id is the largest plus one, as SQLite's rowid does: under
	// the write lock it is free, and an undone insert leaves no gap (a
	// sequence would).
	sqlAgentInsert = sqlAgentInsertRowID + ` RETURNING id`
	// sqlAgentInsertRowID is the insert whose id the driver's result
	// reports (Dialect.InsertRowID).
	sqlAgentInsertRowID = `INSERT INTO agents (id, name, name_context, role, parent_id, generation, responsible, wallet,
		constitution_hash, capability_hash, scope, self_modifying, life, status, state, created_at, created_by, updated_at,
		command, env, dir, restart, grace, replaces, result, handoff, stage, policy, deadline_at, host, requested_by)
		VALUES ((SELECT COALESCE(MAX(id), 0) + 1 FROM agents), ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	// sqlAgentInsertID is the insert with its id given (Dialect.HoldInserts:
	// the writer assigns it, the batch's largest plus one).
	sqlAgentInsertID = `INSERT INTO agents (id, name, name_context, role, parent_id, generation, responsible, wallet,
		constitution_hash, capability_hash, scope, self_modifying, life, status, state, created_at, created_by, updated_at,
		command, env, dir, restart, grace, replaces, result, handoff, stage, policy, deadline_at, host, requested_by)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	sqlAgentUpdateStatus = `UPDATE agents SET status = ?, state = CASE WHEN ? = '' THEN state ELSE ? END, updated_at = ? WHERE id = ?`
	sqlAgentSpawnBlock   = `UPDATE agents SET spawn_blocked_until = ? WHERE id = ?`
	sqlEventAppend       = `INSERT INTO events (seq, time, type, agent_id, parent_id, data, hashes) VALUES (?, ?, ?, ?, ?, ?, ?)`
	sqlRejectionInsert   = `INSERT INTO spawn_rejections (parent_id, at, counted) VALUES (?, ?, ?)`
	sqlRejectionCount    = `SELECT COUNT(*) FROM spawn_rejections WHERE parent_id = ? AND at >= ? AND counted <> 0`
	sqlSettingList       = `SELECT key, value FROM settings ORDER BY key`
	sqlSettingSet        = `INSERT INTO settings (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value`
	sqlAgentKeyInsert    = `INSERT INTO agent_keys (agent_id, jkt, public_key, local, created_at) VALUES (?, ?, ?, ?, ?)`
	sqlAuthTokenInsert   = `INSERT INTO auth_tokens (` + authTokenColumns + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`
)

// writerStatements are prepared on the writer's connection at Open: every
// statement a write transaction runs often. (Preparing on the writer later
// would wait for its only connection, which the open transaction holds.)
func writerStatements() []string {
	return []string{
		sqlAgentByID, sqlAgentSubtree, sqlAgentLiveByName, sqlAgentWalletExists, sqlAgentInsert, sqlAgentInsertRowID,
		sqlAgentUpdateStatus, sqlAgentSpawnBlock, sqlEventAppend, sqlRejectionInsert, sqlRejectionCount,
		sqlSettingList, sqlSettingSet, sqlSpendAdd, sqlSpawnAdd, sqlPermChain, LogSizeSQL, sqlAgentKeyInsert, sqlAuthTokenInsert, countLiveSQL(true, false, false, false, false, false), countLiveSQL(false, true, false, false, true, false), countLiveSQL(false, true, true, false, true, false),
		SavepointSQL, RollbackToSQL, ReleaseSQL,
	}
}

// maxLazyStatements bounds the read pool's cache: queries built from
// filters have many shapes, and only the frequent ones are worth keeping.
const maxLazyStatements = 64

// stmts caches prepared statements of one database.
type stmts struct {
	db   *sql.DB
	d    *Dialect
	lazy bool // prepare on first use (the read pool) rather than only up front
	mu   sync.Mutex
	m    map[string]*sql.Stmt
	// chains are the permission chains the writer read in its
	// transactions (the writer's statements only: speculate.go).
	chains chainMemo
	// perm is the writer's permission rows where it is the database's
	// only writer (permmemo.go); nil elsewhere.
	perm *permMemo
}

func newStmts(db *sql.DB, d *Dialect, lazy bool) *stmts {
	return &stmts{db: db, d: d, lazy: lazy, m: map[string]*sql.Stmt{}}
}

// prepare prepares queries now.
func (s *stmts) prepare(ctx context.Context, queries []string) error {
	for _, q := range queries {
		st, err := s.db.PrepareContext(ctx, s.d.rebind(q))
		if err != nil {
			return err
		}
		s.mu.Lock()
		s.m[q] = st
		s.mu.Unlock()
	}
	return nil
}

// get returns the prepared statement for q, or nil to run q unprepared.
func (s *stmts) get(ctx context.Context, q string) *sql.Stmt {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	st, ok := s.m[q]
	full := len(s.m) >= maxLazyStatements
	s.mu.Unlock()
	if ok || !s.lazy || full {
		return st
	}
	st, err := s.db.PrepareContext(ctx, s.d.rebind(q)) // outside the lock: it may wait for a connection
	if err != nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if prev, ok := s.m[q]; ok {
		st.Close()
		return prev
	}
	s.m[q] = st
	return st
}

func (s *stmts) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for _, st := range s.m {
		errs = append(errs, st.Close())
	}
	s.m = map[string]*sql.Stmt{}
	return errors.Join(errs...)
}

// countLiveSQL is the count of live agents with the given conditions.
func countLiveSQL(parent, role, context, host, accountable, except bool) string {
	where := []string{liveSQL}
	if accountable {
		where = append(where, "state <> '"+string(kin.StateOffline)+"'")
	}
	if parent {
		where = append(where, "parent_id = ?")
	}
	if role {
		where = append(where, "role = ?")
	}
	if context {
		where = append(where, "name_context = ?")
	}
	if host {
		where = append(where, "host = ?")
	}
	if except {
		where = append(where, "id <> ?")
	}
	return `SELECT COUNT(*) FROM agents WHERE ` + strings.Join(where, " AND ")
}
