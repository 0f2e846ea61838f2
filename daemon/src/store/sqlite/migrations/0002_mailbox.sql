-- The mailbox: durable ThreadSend messages, their idempotency keys, and the per-thread
-- event log that ThreadWait reads.

CREATE TABLE messages (
    id             TEXT    PRIMARY KEY,
    target_thread  TEXT    NOT NULL REFERENCES threads (id),
    -- The verified source thread (NULL for external clients); host is '' for this home.
    source_host    TEXT,
    source_thread  TEXT,
    content        TEXT    NOT NULL,
    status         TEXT    NOT NULL CHECK (status IN ('pending', 'delivered', 'undeliverable')),
    reason         TEXT    NOT NULL DEFAULT '',
    created_at     INTEGER NOT NULL,
    delivered_at   INTEGER,
    -- The turn whose input took the message.
    turn_id        TEXT
);

CREATE INDEX messages_pending_by_target ON messages (target_thread) WHERE status = 'pending';

-- One row per (sender, key): a retry with the same key finds the original message.
CREATE TABLE idempotency_keys (
    -- The source thread id, or '' for external clients.
    scope         TEXT    NOT NULL,
    key           TEXT    NOT NULL,
    -- SHA-256 of target and content: the same key with another request is a conflict.
    request_hash  TEXT    NOT NULL,
    message_id    TEXT    NOT NULL REFERENCES messages (id),
    created_at    INTEGER NOT NULL,
    PRIMARY KEY (scope, key)
);

CREATE INDEX idempotency_keys_by_age ON idempotency_keys (created_at);

CREATE TABLE events (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    thread_id    TEXT    NOT NULL,
    kind         TEXT    NOT NULL CHECK (kind IN ('terminal', 'attention', 'lifecycle', 'undeliverable')),
    turn_id      TEXT,
    turn_status  TEXT,
    reason       TEXT    NOT NULL DEFAULT '',
    lifecycle    TEXT    NOT NULL DEFAULT '',
    message_id   TEXT,
    at           INTEGER NOT NULL
);

CREATE INDEX events_by_thread ON events (thread_id, seq);
