-- The lineage registry (seed 000), governor settings and the event stream.
-- Times are Unix nanoseconds (UTC).
CREATE TABLE agents (
    id                  INTEGER PRIMARY KEY,
    name                TEXT    NOT NULL,
    name_context        TEXT    NOT NULL DEFAULT '',
    role                TEXT    NOT NULL DEFAULT '',
    parent_id           INTEGER NOT NULL DEFAULT 0,
    generation          INTEGER NOT NULL,
    responsible         TEXT    NOT NULL,
    wallet              TEXT,
    constitution_hash   TEXT    NOT NULL DEFAULT '',
    capability_hash     TEXT    NOT NULL DEFAULT '',
    scope               TEXT    NOT NULL DEFAULT '',
    self_modifying      INTEGER NOT NULL DEFAULT 0,
    life                TEXT    NOT NULL,
    status              TEXT    NOT NULL,
    state               TEXT    NOT NULL,
    created_at          INTEGER NOT NULL,
    created_by          TEXT    NOT NULL,
    updated_at          INTEGER NOT NULL,
    spawn_blocked_until INTEGER NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX agents_name_live ON agents (name) WHERE status <> 'terminated';
CREATE UNIQUE INDEX agents_wallet ON agents (wallet) WHERE wallet IS NOT NULL;
CREATE INDEX agents_parent ON agents (parent_id, id);
CREATE INDEX agents_role ON agents (role, name_context);
CREATE INDEX agents_responsible ON agents (responsible);

CREATE TABLE events (
    seq       INTEGER PRIMARY KEY,
    time      INTEGER NOT NULL,
    type      TEXT    NOT NULL,
    agent_id  INTEGER NOT NULL DEFAULT 0,
    parent_id INTEGER NOT NULL DEFAULT 0,
    data      TEXT    NOT NULL
);
CREATE INDEX events_agent ON events (agent_id, seq);
CREATE INDEX events_parent ON events (parent_id, seq);

CREATE TABLE spawn_rejections (
    parent_id INTEGER NOT NULL,
    at        INTEGER NOT NULL,
    counted   INTEGER NOT NULL
);
CREATE INDEX spawn_rejections_parent ON spawn_rejections (parent_id, at);

CREATE TABLE settings (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
