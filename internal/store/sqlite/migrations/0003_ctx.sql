-- The agent filesystem and handoff (seed 001): an agent's session id, where
-- its handed-back result stands, and the handoff it was given (JSON of
-- kin.Handoff; '' for none), kept for a replacement and for checking the
-- result against its contract.
ALTER TABLE agents ADD COLUMN session TEXT NOT NULL DEFAULT '';
ALTER TABLE agents ADD COLUMN result  TEXT NOT NULL DEFAULT '';
ALTER TABLE agents ADD COLUMN handoff TEXT NOT NULL DEFAULT '';
