-- Supervised processes (seed 001 "Parent Death", seed 002 §5 liveness and
-- crash recovery). Times are Unix nanoseconds; 0 means "not yet".
ALTER TABLE agents ADD COLUMN pid            INTEGER NOT NULL DEFAULT 0;
ALTER TABLE agents ADD COLUMN command        TEXT    NOT NULL DEFAULT '';  -- JSON array of arguments
ALTER TABLE agents ADD COLUMN env            TEXT    NOT NULL DEFAULT '';  -- JSON array of KEY=VALUE the spawner added
ALTER TABLE agents ADD COLUMN dir            TEXT    NOT NULL DEFAULT '';
ALTER TABLE agents ADD COLUMN restart        TEXT    NOT NULL DEFAULT '';
ALTER TABLE agents ADD COLUMN grace          INTEGER NOT NULL DEFAULT 0;
ALTER TABLE agents ADD COLUMN started_at     INTEGER NOT NULL DEFAULT 0;
ALTER TABLE agents ADD COLUMN ended_at       INTEGER NOT NULL DEFAULT 0;
ALTER TABLE agents ADD COLUMN exit_state     INTEGER NOT NULL DEFAULT 0;   -- 0 none, 1 known, 2 unknown
ALTER TABLE agents ADD COLUMN exit_code      INTEGER NOT NULL DEFAULT 0;
ALTER TABLE agents ADD COLUMN exit_signal    TEXT    NOT NULL DEFAULT '';
ALTER TABLE agents ADD COLUMN end_reason     TEXT    NOT NULL DEFAULT '';
ALTER TABLE agents ADD COLUMN replaces       INTEGER NOT NULL DEFAULT 0;
ALTER TABLE agents ADD COLUMN cursor         TEXT    NOT NULL DEFAULT '';
ALTER TABLE agents ADD COLUMN last_heartbeat INTEGER NOT NULL DEFAULT 0;
CREATE INDEX agents_state ON agents (state);
CREATE INDEX agents_replaces ON agents (replaces) WHERE replaces <> 0;
