-- An agent's request to use a tool, until the owner answers it (or it expires, denied);
-- the attention event that tells the owner names the request.
CREATE TABLE permission_requests (
    id TEXT PRIMARY KEY,
    thread_id TEXT NOT NULL REFERENCES threads (id),
    turn_id TEXT NOT NULL,
    tool TEXT NOT NULL,
    input TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('pending', 'allowed', 'denied', 'expired')),
    reason TEXT NOT NULL DEFAULT '',
    created_at INTEGER NOT NULL,
    decided_at INTEGER
) STRICT;
ALTER TABLE events ADD COLUMN request_id TEXT;
