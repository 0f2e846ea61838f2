-- Cross-home sends: the source's transactional outbox, the target's receipts, and input
-- that must not start a turn by itself (a bridge without `wake`).

CREATE TABLE outbox (
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
    UNIQUE (peer_home_id, key_scope, key)
);

CREATE INDEX outbox_due ON outbox (next_attempt_at) WHERE status = 'pending';
CREATE INDEX outbox_by_bridge ON outbox (bridge_id, created_at);

-- Every bridged send that reached this home, whatever became of it.
CREATE TABLE bridge_receipts (
    seq           INTEGER PRIMARY KEY AUTOINCREMENT,
    peer_home_id  TEXT    NOT NULL,
    key           TEXT    NOT NULL,
    message_id    TEXT    NOT NULL DEFAULT '',
    target        TEXT    NOT NULL,
    status        TEXT    NOT NULL,
    reason        TEXT    NOT NULL DEFAULT '',
    at            INTEGER NOT NULL
);

CREATE INDEX bridge_receipts_by_peer ON bridge_receipts (peer_home_id, seq);

-- 0: queued input that waits for a turn started by something else (no `wake`).
ALTER TABLE inputs ADD COLUMN wake INTEGER NOT NULL DEFAULT 1;
