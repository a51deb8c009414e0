package sqlstore

// The walks in PostgreSQL's words.
//
// PostgreSQL plans a prepared statement once and keeps the plan (its
// "generic" plan, made at the sixth run) until the table's statistics
// change. A daemon on a fresh database runs its first registrations
// against an agents table of a few rows, where joining a walk's rows to
// agents is cheapest by hashing the whole table, and keeps that plan while
// the table grows: each registration's permission chain then read every
// agent (measured: 0.15 ms became 214 ms at 30,000 agents, and the API's
// registrations on PostgreSQL fell to a sixth of the store's). The forms
// below fetch each row of a walk by its key through LATERAL subqueries
// that cannot be flattened into a join (OFFSET 0), so the plan is index
// lookups whatever the statistics said when it was made: the same rows,
// in the same order, at a cost that grows with the walk, not the table.
// SQLite has no LATERAL and plans each statement by its indexes anyway.

// lateralForms maps a shared query to its form on an engine with
// Dialect.Lateral.
var lateralForms = map[string]string{
	sqlPermChain: `
		WITH RECURSIVE up(id, depth) AS (
			SELECT CAST(? AS BIGINT), 0
			UNION ALL
			SELECT (SELECT ` + permParent + ` FROM agents a WHERE a.id = up.id AND a.parent_id <> 0), up.depth + 1
			FROM up WHERE up.id IS NOT NULL
		)
		SELECT CASE WHEN up.depth = 0 THEN ` + agentColumns + ` ELSE '' END,
			a.id, a.parent_id, a.requested_by, a.role, a.stage, a.policy, a.deadline_at,
			COALESCE(s.tokens, 0), COALESCE(s.cost, 0), COALESCE(s.sub_tokens, 0), COALESCE(s.sub_cost, 0),
			COALESCE(s.spawns, 0), COALESCE(s.exhausted, ''), up.depth
		FROM up CROSS JOIN LATERAL (SELECT * FROM agents a WHERE a.id = up.id OFFSET 0) a
			LEFT JOIN LATERAL (SELECT * FROM agent_spend s WHERE s.agent_id = a.id OFFSET 0) s ON true
		ORDER BY up.depth`,
	sqlSpendAdd: `
		WITH RECURSIVE up(id) AS (
			SELECT CAST(?1 AS BIGINT)
			UNION ALL
			SELECT (SELECT ` + permParent + ` FROM agents a WHERE a.id = up.id AND a.parent_id <> 0)
			FROM up WHERE up.id IS NOT NULL
		)
		INSERT INTO agent_spend (agent_id, tokens, cost, sub_tokens, sub_cost)
			SELECT id, ` + spendOwn + `, CAST(?2 AS BIGINT), CAST(?3 AS DOUBLE PRECISION) FROM up WHERE id IS NOT NULL
		` + spendUpsert,
	sqlAgentAncestors: `
		WITH RECURSIVE chain(id, depth) AS (
			SELECT CAST(? AS BIGINT), 0
			UNION ALL
			SELECT (SELECT a.parent_id FROM agents a WHERE a.id = c.id AND a.parent_id <> 0), c.depth + 1
			FROM chain c WHERE c.id IS NOT NULL
		)
		SELECT ` + agentColumns + ` FROM chain c CROSS JOIN LATERAL (SELECT * FROM agents a WHERE a.id = c.id OFFSET 0) a
		ORDER BY c.depth`,
	sqlAgentSubtree: `
		WITH RECURSIVE sub(id) AS (
			SELECT id FROM agents WHERE id = ?
			UNION ALL
			SELECT k.id FROM sub s CROSS JOIN LATERAL (SELECT a.id FROM agents a WHERE a.parent_id = s.id OFFSET 0) k
		)
		SELECT ` + agentColumns + ` FROM sub s CROSS JOIN LATERAL (SELECT * FROM agents a WHERE a.id = s.id OFFSET 0) a`,
	sqlAgentListByIDs: `SELECT ` + agentColumns + ` FROM (SELECT DISTINCT value FROM json_each(?)) i
		CROSS JOIN LATERAL (SELECT * FROM agents a WHERE a.id = i.value OFFSET 0) a`,
	sqlAgentLeanByIDs: `SELECT ` + agentLeanColumns + ` FROM (SELECT DISTINCT value FROM json_each(?)) i
		CROSS JOIN LATERAL (SELECT * FROM agents a WHERE a.id = i.value OFFSET 0) a`,
	sqlAgentRowsByIDs: `SELECT ` + agentColumns + ` FROM (SELECT DISTINCT value FROM json_each(?)) i
		CROSS JOIN LATERAL (SELECT * FROM agents a WHERE a.id = i.value OFFSET 0) a ORDER BY a.id`,
	sqlAgentByParents: `SELECT ` + agentColumns + ` FROM (SELECT DISTINCT value FROM json_each(?)) p
		CROSS JOIN LATERAL (SELECT * FROM agents a WHERE a.parent_id = p.value OFFSET 0) a ORDER BY a.id`,
}

// WalkQueries are the shared queries whose plans must not depend on the
// tables' size when the plan was made, by name, as the driver's tests
// check them (with the arguments to explain them with).
func WalkQueries() map[string]string {
	return map[string]string{
		"PermChain":   sqlPermChain,
		"SpendAdd":    sqlSpendAdd,
		"Ancestors":   sqlAgentAncestors,
		"Subtree":     sqlAgentSubtree,
		"AgentsByIDs": sqlAgentListByIDs,
		"LeanByIDs":   sqlAgentLeanByIDs,
		"RowsByIDs":   sqlAgentRowsByIDs,
		"ByParents":   sqlAgentByParents,
		// PostgreSQL's only (speculate.go): the chain with its rows'
		// text, and the check of a remembered chain.
		"PermChainSigned": sqlPermChainSigned,
		"PermChainCheck":  sqlPermChainCheck,
		// A cancellation's record (AgentUpdateMany) on PostgreSQL, one of
		// its SET lists.
		"UpdateMany": `UPDATE agents SET state = ?` + sqlAgentUpdateManyWhereLateral,
	}
}

// SQL is q as this dialect runs it: its own form, rebound.
func (d *Dialect) SQL(q string) string { return d.rebind(q) }
