-- Permissions (seed 001's attenuation, seed 003's stages): an agent's own
-- stage, the policy it asked for (JSON of kin.Policy; '' for none) and the
-- absolute deadline of its budget (unix ns; 0 for none). Spend is a table
-- of its own: only agents that report usage or are stopped for a budget
-- have a row.
ALTER TABLE agents ADD COLUMN stage       TEXT    NOT NULL DEFAULT '';
ALTER TABLE agents ADD COLUMN policy      TEXT    NOT NULL DEFAULT '';
ALTER TABLE agents ADD COLUMN deadline_at INTEGER NOT NULL DEFAULT 0;

CREATE TABLE agent_spend (
    agent_id  INTEGER PRIMARY KEY REFERENCES agents (id),
    tokens    INTEGER NOT NULL DEFAULT 0,
    cost      REAL    NOT NULL DEFAULT 0,
    exhausted TEXT    NOT NULL DEFAULT ''
);
