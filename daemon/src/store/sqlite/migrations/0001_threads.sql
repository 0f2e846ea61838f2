-- Threads, their queued input and their turns.

CREATE TABLE threads (
    -- Creation order: ThreadList pages by it (keyset cursor, newest first).
    seq           INTEGER PRIMARY KEY AUTOINCREMENT,
    id            TEXT    NOT NULL UNIQUE,
    workspace_id  TEXT    NOT NULL,
    cwd           TEXT    NOT NULL,
    title         TEXT    NOT NULL,
    profile       TEXT    NOT NULL,
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL,
    archived      INTEGER NOT NULL DEFAULT 0,
    enabled       INTEGER NOT NULL DEFAULT 1,
    running       INTEGER NOT NULL DEFAULT 0,
    communication TEXT    NOT NULL DEFAULT 'default',
    turn_count    INTEGER NOT NULL DEFAULT 0
);

-- ThreadList reads only listed threads; partial indexes keep a page an index range scan.
CREATE INDEX threads_listed ON threads (seq) WHERE archived = 0 AND enabled = 1;
CREATE INDEX threads_listed_by_workspace ON threads (workspace_id, seq) WHERE archived = 0 AND enabled = 1;

CREATE TABLE turns (
    id          TEXT    PRIMARY KEY,
    thread_id   TEXT    NOT NULL REFERENCES threads (id),
    seq         INTEGER NOT NULL,
    status      TEXT    NOT NULL CHECK (status IN ('running', 'completed', 'failed', 'cancelled')),
    input       TEXT    NOT NULL,
    output      TEXT    NOT NULL DEFAULT '',
    error       TEXT    NOT NULL DEFAULT '',
    started_at  INTEGER NOT NULL,
    ended_at    INTEGER,
    UNIQUE (thread_id, seq)
);

CREATE INDEX turns_running ON turns (thread_id) WHERE status = 'running';

CREATE TABLE inputs (
    seq            INTEGER PRIMARY KEY AUTOINCREMENT,
    id             TEXT    NOT NULL UNIQUE,
    thread_id      TEXT    NOT NULL REFERENCES threads (id),
    kind           TEXT    NOT NULL CHECK (kind IN ('user', 'message')),
    content        TEXT    NOT NULL,
    message_id     TEXT,
    source_host    TEXT,
    source_thread  TEXT,
    created_at     INTEGER NOT NULL,
    -- NULL while queued; the turn that took it afterwards.
    turn_id        TEXT    REFERENCES turns (id)
);

CREATE INDEX inputs_queued ON inputs (thread_id, seq) WHERE turn_id IS NULL;
CREATE INDEX inputs_by_turn ON inputs (turn_id, seq);
