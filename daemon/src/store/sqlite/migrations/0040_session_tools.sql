-- The session tools: each call in its thread's history, a thread's todo list and notes, its
-- scheduled prompts; and `task` events (a background task ended). SQLite cannot change a
-- CHECK constraint, so the events table is rebuilt with the new kind (seqs kept).
CREATE TABLE tool_calls (
    thread_id    TEXT    NOT NULL,
    seq          INTEGER NOT NULL,
    turn_id      TEXT,
    name         TEXT    NOT NULL,
    arguments    TEXT    NOT NULL,
    outcome      TEXT    NOT NULL CHECK (outcome IN ('ok', 'error', 'denied')),
    result       TEXT    NOT NULL,
    duration_ms  INTEGER NOT NULL,
    at           INTEGER NOT NULL,
    PRIMARY KEY (thread_id, seq)
) WITHOUT ROWID;

CREATE TABLE todo_lists (
    thread_id    TEXT    PRIMARY KEY,
    revision     INTEGER NOT NULL,
    body         TEXT    NOT NULL
);

CREATE TABLE crons (
    id           TEXT    PRIMARY KEY,
    thread_id    TEXT    NOT NULL,
    cron         TEXT    NOT NULL,
    prompt       TEXT    NOT NULL,
    recurring    INTEGER NOT NULL,
    created_at   INTEGER NOT NULL,
    next_fire_at INTEGER NOT NULL,
    added        INTEGER NOT NULL
);
CREATE INDEX crons_by_thread ON crons (thread_id, added);

CREATE TABLE events_with_tasks (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    thread_id    TEXT    NOT NULL,
    kind         TEXT    NOT NULL CHECK (kind IN ('terminal', 'attention', 'lifecycle', 'undeliverable', 'task')),
    turn_id      TEXT,
    turn_status  TEXT,
    reason       TEXT    NOT NULL DEFAULT '',
    lifecycle    TEXT    NOT NULL DEFAULT '',
    message_id   TEXT,
    at           INTEGER NOT NULL,
    request_id   TEXT
);
INSERT INTO events_with_tasks (seq, thread_id, kind, turn_id, turn_status, reason, lifecycle, message_id, at, request_id)
    SELECT seq, thread_id, kind, turn_id, turn_status, reason, lifecycle, message_id, at, request_id FROM events;
DROP TABLE events;
ALTER TABLE events_with_tasks RENAME TO events;
CREATE INDEX events_by_thread ON events (thread_id, seq);
CREATE INDEX events_attention ON events (seq) WHERE kind = 'attention';
