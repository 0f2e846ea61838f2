-- Rooms: a host thread, up to six members, and a log with one order per room.
CREATE TABLE rooms (
    seq            INTEGER PRIMARY KEY AUTOINCREMENT,
    id             TEXT    NOT NULL UNIQUE,
    name           TEXT    NOT NULL,
    host_thread    TEXT    NOT NULL REFERENCES threads (id),
    paused         INTEGER NOT NULL DEFAULT 0,
    paused_reason  TEXT    NOT NULL DEFAULT '',
    archived       INTEGER NOT NULL DEFAULT 0,
    -- Wakes caused by agents' posts since the owner last posted or resumed the room.
    agent_wakes    INTEGER NOT NULL DEFAULT 0,
    -- The newest entry's seq (0: none yet).
    last_seq       INTEGER NOT NULL DEFAULT 0,
    created_at     INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL
);

-- The roster beside the host. `member_id` is what mentions name: a thread id, a persona id,
-- or HOME_ID/SESSION for another home's thread.
CREATE TABLE room_members (
    room_id        TEXT    NOT NULL REFERENCES rooms (id),
    member_id      TEXT    NOT NULL,
    kind           TEXT    NOT NULL CHECK (kind IN ('thread', 'persona', 'remote')),
    -- A persona's thread once made (a thread member's id again, for one lookup by thread).
    thread_id      TEXT,
    profile        TEXT    NOT NULL DEFAULT '',
    instructions   TEXT    NOT NULL DEFAULT '',
    added_at       INTEGER NOT NULL,
    PRIMARY KEY (room_id, member_id)
) WITHOUT ROWID;
CREATE INDEX room_members_by_thread ON room_members (thread_id) WHERE thread_id IS NOT NULL;

CREATE TABLE room_entries (
    room_id        TEXT    NOT NULL REFERENCES rooms (id),
    seq            INTEGER NOT NULL,
    id             TEXT    NOT NULL UNIQUE,
    -- The author: '' for the owner; a thread of this home (author_host ''), or of a peer.
    author_host    TEXT    NOT NULL DEFAULT '',
    author         TEXT    NOT NULL DEFAULT '',
    content        TEXT    NOT NULL,
    -- Space-separated roster ids: mentioned, and woken.
    mentions       TEXT    NOT NULL DEFAULT '',
    woke           TEXT    NOT NULL DEFAULT '',
    key_scope      TEXT    NOT NULL,
    key            TEXT    NOT NULL,
    request_hash   TEXT    NOT NULL,
    at             INTEGER NOT NULL,
    PRIMARY KEY (room_id, seq)
) WITHOUT ROWID;
CREATE UNIQUE INDEX room_entries_by_key ON room_entries (room_id, key_scope, key);

-- A room entry queued for (or taken by) a member's turn names its room.
ALTER TABLE inputs ADD COLUMN room_id TEXT;
