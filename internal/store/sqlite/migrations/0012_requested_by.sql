-- Seed 002 §4.1's escalation (issue 24): the agent that asked for an
-- agent's spawn when the governor placed it under an ancestor instead
-- (0: none). A permission chain (PermChain, the spend roll-up) goes
-- through it rather than through parent_id, so the agent never has more
-- than the one that asked for it.
ALTER TABLE agents ADD COLUMN requested_by INTEGER NOT NULL DEFAULT 0;
