-- One identity for the fleet (issue 24): the public halves of every host's
-- signing keys (the agent provider's and the person server's), so that every
-- host verifies and publishes the tokens any host of the fleet signed. The
-- private halves stay in each host's home. retired_at is when a newer key
-- replaced it (0: its host's current key). Times are unix ns.
CREATE TABLE signing_keys (
    kid        TEXT    PRIMARY KEY,
    host       TEXT    NOT NULL,
    role       TEXT    NOT NULL,
    public_key BLOB    NOT NULL,
    created_at INTEGER NOT NULL,
    retired_at INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX signing_keys_host ON signing_keys (host, role);
