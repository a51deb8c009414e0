-- One identity for the fleet (issue 24): SQLite's migration 11. The public
-- halves of every host's signing keys; the private halves stay in each
-- host's home. retired_at: 0 for its host's current key. Times are unix ns.
CREATE TABLE signing_keys (
    kid        TEXT   PRIMARY KEY,
    host       TEXT   NOT NULL,
    role       TEXT   NOT NULL,
    public_key BYTEA  NOT NULL,
    created_at BIGINT NOT NULL,
    retired_at BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX signing_keys_host ON signing_keys (host, role);
