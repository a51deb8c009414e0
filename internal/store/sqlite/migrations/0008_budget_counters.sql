-- The counters a budget is checked against live in the store, read and
-- written inside the transaction that checks them (issue 20), instead of
-- the daemon's memory: each agent's subtree spend (itself and every
-- descendant) and how many descendants were ever spawned under it while it
-- had a max_descendants budget. Filled here from what is already stored.
ALTER TABLE agent_spend ADD COLUMN sub_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE agent_spend ADD COLUMN sub_cost   REAL    NOT NULL DEFAULT 0;
ALTER TABLE agent_spend ADD COLUMN spawns     INTEGER NOT NULL DEFAULT 0;

-- Every spender's own spend counts for itself and each ancestor.
WITH RECURSIVE up(spender, id) AS (
    SELECT agent_id, agent_id FROM agent_spend
    UNION ALL
    SELECT up.spender, a.parent_id FROM up JOIN agents a ON a.id = up.id WHERE a.parent_id <> 0
)
INSERT INTO agent_spend (agent_id, sub_tokens, sub_cost)
SELECT up.id, SUM(s.tokens), SUM(s.cost) FROM up JOIN agent_spend s ON s.agent_id = up.spender WHERE true GROUP BY up.id
ON CONFLICT (agent_id) DO UPDATE SET sub_tokens = excluded.sub_tokens, sub_cost = excluded.sub_cost;

-- An agent whose budget has max_descendants: count its descendants (agents
-- are never deleted, so every one ever spawned under it).
WITH RECURSIVE down(root, id) AS (
    SELECT id, id FROM agents WHERE policy <> '' AND json_extract(policy, '$.budget.max_descendants') IS NOT NULL
    UNION ALL
    SELECT down.root, a.id FROM down JOIN agents a ON a.parent_id = down.id
)
INSERT INTO agent_spend (agent_id, spawns)
SELECT root, COUNT(*) - 1 FROM down WHERE true GROUP BY root HAVING COUNT(*) > 1
ON CONFLICT (agent_id) DO UPDATE SET spawns = excluded.spawns;
