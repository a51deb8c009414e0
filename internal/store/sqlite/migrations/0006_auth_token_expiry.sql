-- The daemon prunes expired auth tokens every few minutes and lists the
-- unexpired ones: both select on expires_at.
CREATE INDEX auth_tokens_expires ON auth_tokens (expires_at);
