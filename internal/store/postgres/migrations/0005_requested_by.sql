-- Seed 002 §4.1's escalation (issue 24): SQLite's migration 12. The agent
-- that asked for an agent's spawn when the governor placed it under an
-- ancestor instead (0: none); permission chains go through it.
ALTER TABLE agents ADD COLUMN requested_by BIGINT NOT NULL DEFAULT 0;
