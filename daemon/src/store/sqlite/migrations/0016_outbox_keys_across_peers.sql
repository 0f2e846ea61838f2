-- A sender's idempotency key names one message, whichever home it went to: the outbox's
-- keys are looked up by (key_scope, key) across peers, so the uniqueness rule's index leads
-- with them. SQLite cannot change a UNIQUE constraint in place: the table is rebuilt (the
-- rule keeps the peer, so an outbox from before, which may hold one key for two peers,
-- copies as it is).
CREATE TABLE outbox_new (
    -- The source's message id.
    id                 TEXT    PRIMARY KEY,
    bridge_id          TEXT    NOT NULL,
    peer_home_id       TEXT    NOT NULL,
    target_session     TEXT    NOT NULL,
    -- The verified source thread; NULL for external clients.
    source_thread      TEXT,
    content            TEXT    NOT NULL,
    key_scope          TEXT    NOT NULL,
    key                TEXT    NOT NULL,
    request_hash       TEXT    NOT NULL,
    -- pending: not yet acknowledged; accepted: the target has it durably; delivered: it
    -- entered the target's prompt; rejected / expired: final, with a reason.
    status             TEXT    NOT NULL CHECK (status IN ('pending', 'accepted', 'delivered', 'rejected', 'expired')),
    reason             TEXT    NOT NULL DEFAULT '',
    remote_message_id  TEXT    NOT NULL DEFAULT '',
    attempts           INTEGER NOT NULL DEFAULT 0,
    next_attempt_at    INTEGER NOT NULL,
    created_at         INTEGER NOT NULL,
    updated_at         INTEGER NOT NULL,
    UNIQUE (key_scope, key, peer_home_id)
);
INSERT INTO outbox_new SELECT id, bridge_id, peer_home_id, target_session, source_thread, content, key_scope,
    key, request_hash, status, reason, remote_message_id, attempts, next_attempt_at, created_at, updated_at
    FROM outbox;
DROP TABLE outbox;
ALTER TABLE outbox_new RENAME TO outbox;
CREATE INDEX outbox_by_bridge ON outbox (bridge_id, created_at);
CREATE INDEX outbox_due ON outbox (peer_home_id, next_attempt_at) WHERE status IN ('pending', 'accepted');
