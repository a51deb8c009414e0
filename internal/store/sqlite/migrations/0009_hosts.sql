-- The fleet (issue 24): every kin serve is a host named by --host-name,
-- holding a lease on its name that it renews (seed 002's heartbeat at host
-- level); home is the id of the daemon's home, so a daemon restarted on the
-- same home takes its name back at once and another home cannot while the
-- lease runs. Each agent records the host that runs it. Times are unix ns.
CREATE TABLE hosts (
    name        TEXT    PRIMARY KEY,
    home        TEXT    NOT NULL,
    address     TEXT    NOT NULL DEFAULT '',
    containment TEXT    NOT NULL DEFAULT '',
    version     TEXT    NOT NULL DEFAULT '',
    started_at  INTEGER NOT NULL,
    renewed_at  INTEGER NOT NULL,
    lease_until INTEGER NOT NULL
);
ALTER TABLE agents ADD COLUMN host TEXT NOT NULL DEFAULT '';
CREATE INDEX agents_host ON agents (host, status);
