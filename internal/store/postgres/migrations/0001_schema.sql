-- kin's schema on PostgreSQL: the SQLite driver's migrations 1-8 as one.
-- The columns keep SQLite's types, so the queries package sqlstore shares
-- read the same values from both: times are Unix nanoseconds (UTC) in
-- BIGINT, 0 for "none"; flags are 0/1 integers; JSON is kept as text.
-- A later change of the schema is a migration in both drivers.
CREATE TABLE agents (
    id                  BIGINT  PRIMARY KEY,
    name                TEXT    NOT NULL,
    name_context        TEXT    NOT NULL DEFAULT '',
    role                TEXT    NOT NULL DEFAULT '',
    parent_id           BIGINT  NOT NULL DEFAULT 0,
    generation          BIGINT  NOT NULL,
    responsible         TEXT    NOT NULL,
    wallet              TEXT,
    constitution_hash   TEXT    NOT NULL DEFAULT '',
    capability_hash     TEXT    NOT NULL DEFAULT '',
    scope               TEXT    NOT NULL DEFAULT '',
    self_modifying      BIGINT  NOT NULL DEFAULT 0,
    life                TEXT    NOT NULL,
    status              TEXT    NOT NULL,
    state               TEXT    NOT NULL,
    created_at          BIGINT  NOT NULL,
    created_by          TEXT    NOT NULL,
    updated_at          BIGINT  NOT NULL,
    spawn_blocked_until BIGINT  NOT NULL DEFAULT 0,
    -- Supervised processes (seed 001 "Parent Death", seed 002 §5).
    pid            BIGINT NOT NULL DEFAULT 0,
    command        TEXT   NOT NULL DEFAULT '',  -- JSON array of arguments
    env            TEXT   NOT NULL DEFAULT '',  -- JSON array of KEY=VALUE the spawner added
    dir            TEXT   NOT NULL DEFAULT '',
    restart        TEXT   NOT NULL DEFAULT '',
    grace          BIGINT NOT NULL DEFAULT 0,
    started_at     BIGINT NOT NULL DEFAULT 0,
    ended_at       BIGINT NOT NULL DEFAULT 0,
    exit_state     BIGINT NOT NULL DEFAULT 0,   -- 0 none, 1 known, 2 unknown
    exit_code      BIGINT NOT NULL DEFAULT 0,
    exit_signal    TEXT   NOT NULL DEFAULT '',
    end_reason     TEXT   NOT NULL DEFAULT '',
    replaces       BIGINT NOT NULL DEFAULT 0,
    cursor         TEXT   NOT NULL DEFAULT '',
    last_heartbeat BIGINT NOT NULL DEFAULT 0,
    -- The agent filesystem and handoff (seed 001).
    session TEXT NOT NULL DEFAULT '',
    result  TEXT NOT NULL DEFAULT '',
    handoff TEXT NOT NULL DEFAULT '',
    -- Permissions (seed 001's attenuation, seed 003's stages).
    stage       TEXT   NOT NULL DEFAULT '',
    policy      TEXT   NOT NULL DEFAULT '',
    deadline_at BIGINT NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX agents_name_live ON agents (name) WHERE status <> 'terminated';
CREATE UNIQUE INDEX agents_wallet ON agents (wallet) WHERE wallet IS NOT NULL;
CREATE INDEX agents_parent ON agents (parent_id, id);
CREATE INDEX agents_role ON agents (role, name_context);
CREATE INDEX agents_responsible ON agents (responsible);
CREATE INDEX agents_state ON agents (state);
CREATE INDEX agents_replaces ON agents (replaces) WHERE replaces <> 0;

-- The event stream and the verifiable log: hashes holds the leaf's stored
-- form (auditlog.StoredForm), written in the event's own transaction.
CREATE TABLE events (
    seq       BIGINT PRIMARY KEY,
    time      BIGINT NOT NULL,
    type      TEXT   NOT NULL,
    agent_id  BIGINT NOT NULL DEFAULT 0,
    parent_id BIGINT NOT NULL DEFAULT 0,
    data      TEXT   NOT NULL,
    hashes    BYTEA
);
CREATE INDEX events_agent ON events (agent_id, seq);
CREATE INDEX events_parent ON events (parent_id, seq);

CREATE TABLE spawn_rejections (
    parent_id BIGINT NOT NULL,
    at        BIGINT NOT NULL,
    counted   BIGINT NOT NULL
);
CREATE INDEX spawn_rejections_parent ON spawn_rejections (parent_id, at);

CREATE TABLE settings (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE agent_spend (
    agent_id   BIGINT PRIMARY KEY REFERENCES agents (id),
    tokens     BIGINT NOT NULL DEFAULT 0,
    cost       DOUBLE PRECISION NOT NULL DEFAULT 0,
    exhausted  TEXT   NOT NULL DEFAULT '',
    sub_tokens BIGINT NOT NULL DEFAULT 0,
    sub_cost   DOUBLE PRECISION NOT NULL DEFAULT 0,
    spawns     BIGINT NOT NULL DEFAULT 0
);

-- Identity (AAuth, seed 004).
CREATE TABLE agent_keys (
    agent_id   BIGINT PRIMARY KEY REFERENCES agents (id),
    jkt        TEXT   NOT NULL UNIQUE,
    public_key BYTEA  NOT NULL,
    local      TEXT   NOT NULL,
    created_at BIGINT NOT NULL
);

CREATE TABLE grants (
    agent_id   BIGINT NOT NULL REFERENCES agents (id),
    resource   TEXT   NOT NULL,
    scope      TEXT   NOT NULL,
    until      BIGINT NOT NULL DEFAULT 0,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (agent_id, resource)
);

CREATE TABLE auth_tokens (
    jti            TEXT   PRIMARY KEY,
    agent_id       BIGINT NOT NULL,
    parent_id      BIGINT NOT NULL,
    resource       TEXT   NOT NULL,
    scope          TEXT   NOT NULL,
    issued_at      BIGINT NOT NULL,
    expires_at     BIGINT NOT NULL,
    revoked_at     BIGINT NOT NULL DEFAULT 0,
    revoked_reason TEXT   NOT NULL DEFAULT ''
);
CREATE INDEX auth_tokens_agent ON auth_tokens (agent_id);
CREATE INDEX auth_tokens_parent ON auth_tokens (parent_id);
CREATE INDEX auth_tokens_expires ON auth_tokens (expires_at);

-- Signed tree heads (C2SP signed notes), one per size.
CREATE TABLE log_checkpoints (
    size BIGINT PRIMARY KEY,
    time BIGINT NOT NULL,
    note TEXT   NOT NULL
);

-- A list of ids, given as a JSON array in one text parameter: what
-- SQLite's json_each(?) gives the shared queries (Rebind names this).
CREATE FUNCTION kin_ids(list text) RETURNS TABLE (value bigint)
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$ SELECT CAST(e AS bigint) FROM json_array_elements_text(CAST(list AS json)) AS e $$;
