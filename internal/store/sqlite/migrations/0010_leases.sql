-- The fleet's singletons (issue 24): a lease per name, held by one holder
-- (a host) until a time (unix ns; 0: released). The log's checkpoint signer
-- is one: only the host holding "log-signer" signs the fleet's log.
CREATE TABLE leases (
    name   TEXT    PRIMARY KEY,
    holder TEXT    NOT NULL,
    until  INTEGER NOT NULL
);
