-- Rooms across homes. A room entry's id beside the input it became (in another home its
-- message has an id of its own); the room tag an outbox entry carries to a member of
-- another home; and, at a member's home, where each room its threads joined lives.
ALTER TABLE inputs ADD COLUMN room_entry TEXT;
ALTER TABLE outbox ADD COLUMN room_id TEXT;
ALTER TABLE outbox ADD COLUMN room_entry TEXT;
ALTER TABLE outbox ADD COLUMN room_author_host TEXT;
ALTER TABLE outbox ADD COLUMN room_author TEXT;
CREATE INDEX outbox_by_room_entry ON outbox (room_entry) WHERE room_entry IS NOT NULL;

CREATE TABLE remote_rooms (
    room_id        TEXT    PRIMARY KEY,
    -- The home the room lives in (a peer's verified home id).
    home_id        TEXT    NOT NULL,
    updated_at     INTEGER NOT NULL
) WITHOUT ROWID;
