-- Identity (AAuth, seed 004). An agent's public key (the daemon never
-- stores a private key) and its AAuth local part; grants, which are keyed
-- on top-level agents only; and the auth tokens kin issued as a person
-- server, kept a day past their expiry so that revoking them can be listed and
-- checked. Times are unix nanoseconds, 0 for none.
CREATE TABLE agent_keys (
    agent_id   INTEGER PRIMARY KEY REFERENCES agents (id),
    jkt        TEXT    NOT NULL UNIQUE,
    public_key BLOB    NOT NULL,
    local      TEXT    NOT NULL,
    created_at INTEGER NOT NULL
);

CREATE TABLE grants (
    agent_id   INTEGER NOT NULL REFERENCES agents (id),
    resource   TEXT    NOT NULL,
    scope      TEXT    NOT NULL,
    until      INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (agent_id, resource)
);

CREATE TABLE auth_tokens (
    jti            TEXT    PRIMARY KEY,
    agent_id       INTEGER NOT NULL,
    parent_id      INTEGER NOT NULL,
    resource       TEXT    NOT NULL,
    scope          TEXT    NOT NULL,
    issued_at      INTEGER NOT NULL,
    expires_at     INTEGER NOT NULL,
    revoked_at     INTEGER NOT NULL DEFAULT 0,
    revoked_reason TEXT    NOT NULL DEFAULT ''
);
CREATE INDEX auth_tokens_agent ON auth_tokens (agent_id);
CREATE INDEX auth_tokens_parent ON auth_tokens (parent_id);
