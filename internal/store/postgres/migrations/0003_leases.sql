-- The fleet's singletons (issue 24): SQLite's migration 10.
CREATE TABLE leases (
    name   TEXT   PRIMARY KEY,
    holder TEXT   NOT NULL,
    until  BIGINT NOT NULL
);
