-- The fleet (issue 24): SQLite's migration 9. Every kin serve is a host
-- named by --host-name, holding a lease on its name that it renews; home
-- is the id of the daemon's home. Each agent records the host that runs it.
CREATE TABLE hosts (
    name        TEXT   PRIMARY KEY,
    home        TEXT   NOT NULL,
    address     TEXT   NOT NULL DEFAULT '',
    containment TEXT   NOT NULL DEFAULT '',
    version     TEXT   NOT NULL DEFAULT '',
    started_at  BIGINT NOT NULL,
    renewed_at  BIGINT NOT NULL,
    lease_until BIGINT NOT NULL
);
ALTER TABLE agents ADD COLUMN host TEXT NOT NULL DEFAULT '';
CREATE INDEX agents_host ON agents (host, status);
