package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"time"

	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/kin"
)

const authTokenColumns = `jti, agent_id, parent_id, resource, scope, issued_at, expires_at, revoked_at, revoked_reason`

func (r reader) agentKey(ctx context.Context, where string, arg any) (store.AgentKeyRow, error) {
	var k store.AgentKeyRow
	var created int64
	err := r.queryRow(ctx, `SELECT agent_id, jkt, public_key, local, created_at FROM agent_keys WHERE `+where, arg).
		Scan(&k.Agent, &k.JKT, &k.PublicKey, &k.Local, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return store.AgentKeyRow{}, store.ErrNotFound
	}
	if err != nil {
		return store.AgentKeyRow{}, interpretError(err)
	}
	k.CreatedAt = unixTime(created)
	return k, nil
}

func (r reader) AgentKeyGet(ctx context.Context, id kin.AgentID) (store.AgentKeyRow, error) {
	return r.agentKey(ctx, `agent_id = ?`, id)
}

func (r reader) AgentKeyByJKT(ctx context.Context, jkt string) (store.AgentKeyRow, error) {
	return r.agentKey(ctx, `jkt = ?`, jkt)
}

func (r reader) GrantList(ctx context.Context, agent kin.AgentID) ([]store.GrantRow, error) {
	q := `SELECT agent_id, resource, scope, until, created_at FROM grants`
	var args []any
	if agent != 0 {
		q += ` WHERE agent_id = ?`
		args = append(args, agent)
	}
	rows, err := r.query(ctx, q+` ORDER BY agent_id, resource`, args...)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	var out []store.GrantRow
	for rows.Next() {
		var g store.GrantRow
		var until, created int64
		if err := rows.Scan(&g.Agent, &g.Resource, &g.Scope, &until, &created); err != nil {
			return nil, interpretError(err)
		}
		g.Until, g.CreatedAt = unixTime(until), unixTime(created)
		out = append(out, g)
	}
	return out, interpretError(rows.Err())
}

func scanAuthToken(sc interface{ Scan(...any) error }) (store.AuthTokenRow, error) {
	var t store.AuthTokenRow
	var issued, expires, revoked int64
	if err := sc.Scan(&t.JTI, &t.Agent, &t.Parent, &t.Resource, &t.Scope, &issued, &expires, &revoked, &t.RevokedReason); err != nil {
		return store.AuthTokenRow{}, err
	}
	t.IssuedAt, t.ExpiresAt, t.RevokedAt = unixTime(issued), unixTime(expires), unixTime(revoked)
	return t, nil
}

func (r reader) AuthTokenGet(ctx context.Context, jti string) (store.AuthTokenRow, error) {
	t, err := scanAuthToken(r.queryRow(ctx, `SELECT `+authTokenColumns+` FROM auth_tokens WHERE jti = ?`, jti))
	if errors.Is(err, sql.ErrNoRows) {
		return store.AuthTokenRow{}, store.ErrNotFound
	}
	return t, interpretError(err)
}

func (r reader) AuthTokenList(ctx context.Context, agent kin.AgentID, since time.Time) ([]store.AuthTokenRow, error) {
	q := `SELECT ` + authTokenColumns + ` FROM auth_tokens WHERE expires_at > ?`
	args := []any{nanos(since)}
	if agent != 0 {
		q += ` AND (agent_id = ? OR parent_id = ?)`
		args = append(args, agent, agent)
	}
	rows, err := r.query(ctx, q+` ORDER BY issued_at DESC, jti`, args...)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	var out []store.AuthTokenRow
	for rows.Next() {
		t, err := scanAuthToken(rows)
		if err != nil {
			return nil, interpretError(err)
		}
		out = append(out, t)
	}
	return out, interpretError(rows.Err())
}

func (t *txn) AgentKeyInsert(ctx context.Context, k store.AgentKeyRow) error {
	_, err := t.exec(ctx, sqlAgentKeyInsert, k.Agent, k.JKT, k.PublicKey, k.Local, nanos(k.CreatedAt))
	return interpretError(err)
}

func (t *txn) GrantSet(ctx context.Context, g store.GrantRow) error {
	_, err := t.exec(ctx, `INSERT INTO grants (agent_id, resource, scope, until, created_at) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (agent_id, resource) DO UPDATE SET scope = excluded.scope, until = excluded.until, created_at = excluded.created_at`,
		g.Agent, g.Resource, g.Scope, nanos(g.Until), nanos(g.CreatedAt))
	return interpretError(err)
}

func (t *txn) GrantDelete(ctx context.Context, agent kin.AgentID, resource string) (bool, error) {
	res, err := t.exec(ctx, `DELETE FROM grants WHERE agent_id = ? AND resource = ?`, agent, resource)
	if err != nil {
		return false, interpretError(err)
	}
	n, err := res.RowsAffected()
	return n > 0, interpretError(err)
}

func (t *txn) AuthTokenInsert(ctx context.Context, a store.AuthTokenRow) error {
	_, err := t.exec(ctx, sqlAuthTokenInsert, a.JTI, a.Agent, a.Parent, a.Resource, a.Scope,
		nanos(a.IssuedAt), nanos(a.ExpiresAt), nanos(a.RevokedAt), a.RevokedReason)
	return interpretError(err)
}

func (t *txn) AuthTokenRevoke(ctx context.Context, p store.AuthTokenRevokeParams) ([]store.AuthTokenRow, error) {
	var cond []string
	args := []any{nanos(p.At), p.Reason, nanos(p.At)}
	if len(p.Agents) > 0 {
		ids := make([]string, len(p.Agents))
		for i, id := range p.Agents {
			ids[i] = id.String()
		}
		list := "[" + strings.Join(ids, ",") + "]"
		cond = append(cond, `(agent_id IN (SELECT value FROM json_each(?)) OR parent_id IN (SELECT value FROM json_each(?)))`)
		args = append(args, list, list)
	}
	if p.Parent != 0 {
		c := `(parent_id = ?`
		args = append(args, p.Parent)
		if p.Resource != "" {
			c += ` AND resource = ?`
			args = append(args, p.Resource)
		}
		cond = append(cond, c+`)`)
	}
	if len(cond) == 0 {
		return nil, nil
	}
	rows, err := t.query(ctx, `UPDATE auth_tokens SET revoked_at = ?, revoked_reason = ?
		WHERE revoked_at = 0 AND expires_at > ? AND (`+strings.Join(cond, " OR ")+`)
		RETURNING `+authTokenColumns, args...)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	var out []store.AuthTokenRow
	for rows.Next() {
		a, err := scanAuthToken(rows)
		if err != nil {
			return nil, interpretError(err)
		}
		out = append(out, a)
	}
	return out, interpretError(rows.Err())
}

func (t *txn) AuthTokenPrune(ctx context.Context, at time.Time) error {
	_, err := t.exec(ctx, `DELETE FROM auth_tokens WHERE expires_at <= ?`, nanos(at))
	return interpretError(err)
}
