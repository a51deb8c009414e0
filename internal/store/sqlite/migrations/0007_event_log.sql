-- The verifiable event log: every event is a leaf of a Merkle tree; hashes
-- holds its leaf's stored form (auditlog.StoredForm: 8 bytes of the leaf hash,
-- then the 32-byte hashes of the large subtrees it completes), written in the
-- same transaction as the event. Existing
-- events are hashed once, by this migration's Go step (backfillLog).
ALTER TABLE events ADD COLUMN hashes BLOB;

-- Signed tree heads (C2SP signed notes), one per size.
CREATE TABLE log_checkpoints (
    size INTEGER PRIMARY KEY,
    time INTEGER NOT NULL,
    note TEXT    NOT NULL
);
