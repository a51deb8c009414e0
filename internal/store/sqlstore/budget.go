package sqlstore

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/kin"
)

// Spend and the counters budgets are checked against (migration 8). They
// are written in the transaction that reports usage or registers an agent
// and read by the checks of later ones, so group commit cannot let two
// registrations of one batch miss each other.
const (
	// sqlSpendAdd adds usage to the agent's own spend and to the subtree
	// sums of each link of its permission chain (permParent, the agent
	// first): every subtree the usage lies in, and the budget of an agent
	// that asked for an escalated spawn. One statement: the agent's row
	// takes both its own and its subtree's share.
	sqlSpendAdd = `
		WITH RECURSIVE up(id) AS (
			SELECT CAST(?1 AS BIGINT)
			UNION ALL
			SELECT ` + permParent + ` FROM up JOIN agents a ON a.id = up.id WHERE a.parent_id <> 0
		)
		INSERT INTO agent_spend (agent_id, tokens, cost, sub_tokens, sub_cost)
			SELECT id, ` + spendOwn + `, CAST(?2 AS BIGINT), CAST(?3 AS DOUBLE PRECISION) FROM up WHERE true
		` + spendUpsert
	sqlSpawnAdd = `INSERT INTO agent_spend (agent_id, spawns) SELECT value, 1 FROM json_each(?) WHERE true
		ON CONFLICT (agent_id) DO UPDATE SET spawns = agent_spend.spawns + 1`
)

// spendOwn is sqlSpendAdd's own tokens and cost of a link of the chain:
// the usage on the agent's row, nothing on its ancestors'.
const spendOwn = `CASE WHEN id = ?1 THEN CAST(?2 AS BIGINT) ELSE 0 END, CASE WHEN id = ?1 THEN CAST(?3 AS DOUBLE PRECISION) ELSE 0 END`

// spendUpsert adds a row's usage to the spend the agent already has.
const spendUpsert = `ON CONFLICT (agent_id) DO UPDATE SET tokens = agent_spend.tokens + excluded.tokens, cost = agent_spend.cost + excluded.cost,
			sub_tokens = agent_spend.sub_tokens + excluded.sub_tokens, sub_cost = agent_spend.sub_cost + excluded.sub_cost`

// permParent is the next link of an agent's permission chain: the agent
// that asked for its spawn when it was escalated (requested_by, itself a
// descendant of parent_id, so the chain holds every ancestor too), else
// its parent.
const permParent = `CASE WHEN a.requested_by <> 0 THEN a.requested_by ELSE a.parent_id END`

// sqlPermChain is the permission chain, the asked-for agent with its whole
// row, each row's depth last. It has no ORDER BY: SQLite's sorter copied
// every row, the packed one included, and took a third of the read (66
// against 44 µs of CPU for a 2-row chain); permChain puts the rows in
// order by their depth.
var sqlPermChain = `
		WITH RECURSIVE up(id, depth) AS (
			SELECT id, 0 FROM agents WHERE id = ?
			UNION ALL
			SELECT ` + permParent + `, up.depth + 1 FROM up JOIN agents a ON a.id = up.id WHERE a.parent_id <> 0
		)
		SELECT CASE WHEN up.depth = 0 THEN ` + agentColumns + ` ELSE '' END,
			a.id, a.parent_id, a.requested_by, a.role, a.stage, a.policy, a.deadline_at,
			COALESCE(s.tokens, 0), COALESCE(s.cost, 0), COALESCE(s.sub_tokens, 0), COALESCE(s.sub_cost, 0),
			COALESCE(s.spawns, 0), COALESCE(s.exhausted, ''), up.depth
		FROM up JOIN agents a ON a.id = up.id LEFT JOIN agent_spend s ON s.agent_id = a.id`

func (r reader) SpendList(ctx context.Context) ([]store.SpendRow, error) {
	rows, err := r.query(ctx, `SELECT agent_id, tokens, cost, sub_tokens, sub_cost, spawns, exhausted FROM agent_spend ORDER BY agent_id`)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	var out []store.SpendRow
	for rows.Next() {
		var s store.SpendRow
		if err := rows.Scan(&s.ID, &s.Tokens, &s.Cost, &s.SubTokens, &s.SubCost, &s.Spawns, &s.Exhausted); err != nil {
			return nil, interpretError(err)
		}
		out = append(out, s)
	}
	return out, interpretError(rows.Err())
}

func (r reader) PermChain(ctx context.Context, id kin.AgentID) ([]store.PermRow, error) {
	rows, _, err := r.permChain(ctx, sqlPermChain, id, false)
	return rows, err
}

// permChain reads a permission chain with q (sqlPermChain, or
// sqlPermChainSigned when signed: each row's text last, returned in texts),
// in the order of the rows' depth.
func (r reader) permChain(ctx context.Context, q string, id kin.AgentID, signed bool) (out []store.PermRow, texts []string, err error) {
	rows, err := r.query(ctx, q, id)
	if err != nil {
		return nil, nil, interpretError(err)
	}
	defer rows.Close()
	ordered := true
	var depths []int64
	for rows.Next() {
		var p store.PermRow
		var packed, pol, text string
		var deadline, depth int64
		s := &p.Spend
		dest := []any{&packed, &p.ID, &p.Parent, &p.RequestedBy, &p.Role, &p.Stage, &pol, &deadline,
			&s.Tokens, &s.Cost, &s.SubTokens, &s.SubCost, &s.Spawns, &s.Exhausted, &depth}
		if signed {
			dest = append(dest, &text)
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, nil, interpretError(err)
		}
		if packed != "" {
			a, err := unpackAgent(packed)
			if err != nil {
				return nil, nil, err
			}
			p.Agent = a
		}
		s.ID = p.ID
		if pol != "" {
			p.Policy = []byte(pol)
		}
		p.DeadlineAt = unixTime(deadline)
		ordered = ordered && depth == int64(len(out))
		out = append(out, p)
		depths = append(depths, depth)
		if signed {
			texts = append(texts, text)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, interpretError(err)
	}
	if !ordered {
		return chainInOrder(out, texts, depths)
	}
	return out, texts, nil
}

// chainInOrder is a chain read out of order put in the order of its rows'
// depths (with their texts): each depth from 0 once, or it is an error.
func chainInOrder(rows []store.PermRow, texts []string, depths []int64) ([]store.PermRow, []string, error) {
	out := make([]store.PermRow, len(rows))
	var outTexts []string
	if texts != nil {
		outTexts = make([]string, len(texts))
	}
	seen := make([]bool, len(rows))
	for i, d := range depths {
		if d < 0 || d >= int64(len(rows)) || seen[d] {
			return nil, nil, fmt.Errorf("store: permission chain of agent %d: depth %d out of place", rows[0].ID, d)
		}
		seen[d] = true
		out[d] = rows[i]
		if texts != nil {
			outTexts[d] = texts[i]
		}
	}
	return out, outTexts, nil
}

// SpendAdd's write needs no answer: in a deferred Update (held.go) it is
// held, and goes with the Update's next statement (the model gateway's
// metering: with its read of the chain's sums).
func (t *txn) SpendAdd(ctx context.Context, id kin.AgentID, tokens int64, cost float64) error {
	t.forgetChains()
	if m := t.perm(); m != nil {
		m.spent(id)
	}
	_, err := t.execHeld(ctx, sqlSpendAdd, id, tokens, cost)
	return interpretError(err)
}

func (t *txn) SpendSpawnAdd(ctx context.Context, ids []kin.AgentID) error {
	if len(ids) == 0 {
		return nil
	}
	t.forgetChains()
	b, err := json.Marshal(ids)
	if err != nil {
		return err
	}
	_, err = t.execHeld(ctx, sqlSpawnAdd, string(b)) // held in a deferred Update, as SpendAdd
	if m := t.perm(); m != nil {
		if err != nil {
			m.forget() // whatever the statement did or not
		} else {
			m.spawned(ids)
		}
	}
	return interpretError(err)
}
