package sqlstore

import (
	"context"
	"database/sql"
	"time"
)

// These reads serve the daemon's metrics at each scrape (kin_agents, the
// oldest heartbeat): aggregates, where AgentCount has only the total and
// AgentList would load every agent. Prepared once on the read pool, like
// the other frequent reads.

// AgentCountByStateRole calls fn once for each (state, role) pair with the
// number of agents, of any status, in it: one grouped scan of the agents
// table.
func (r reader) AgentCountByStateRole(ctx context.Context, fn func(state, role string, n int)) error {
	rows, err := r.query(ctx, `SELECT state, role, COUNT(*) FROM agents GROUP BY state, role`)
	if err != nil {
		return interpretError(err)
	}
	defer rows.Close()
	for rows.Next() {
		var state, role string
		var n int
		if err := rows.Scan(&state, &role, &n); err != nil {
			return interpretError(err)
		}
		fn(state, role, n)
	}
	return interpretError(rows.Err())
}

// OldestHeartbeat returns the earliest last heartbeat among active agents
// whose state is active or stale (those the liveness watch follows), and
// false when there is none.
func (r reader) OldestHeartbeat(ctx context.Context) (time.Time, bool, error) {
	var ns sql.NullInt64
	err := r.queryRow(ctx, `SELECT MIN(last_heartbeat) FROM agents
		WHERE state IN ('active', 'stale') AND status = 'active' AND last_heartbeat > 0`).Scan(&ns)
	if err != nil {
		return time.Time{}, false, interpretError(err)
	}
	if !ns.Valid {
		return time.Time{}, false, nil
	}
	return unixTime(ns.Int64), true, nil
}
