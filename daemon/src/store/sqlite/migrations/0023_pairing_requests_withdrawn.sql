-- A source that revokes its side tells the target, which marks the request it had filed
-- and that still waits `withdrawn`: its owner can no longer approve a bridge the source
-- gave up. SQLite cannot change a CHECK constraint in place: the table is rebuilt.
CREATE TABLE bridge_requests_new (
    id            TEXT    PRIMARY KEY,
    peer_home_id  TEXT    NOT NULL,
    name          TEXT    NOT NULL,
    want          TEXT    NOT NULL,
    status        TEXT    NOT NULL
                  CHECK (status IN ('pending', 'approved', 'rejected', 'expired', 'replaced', 'withdrawn')),
    created_at    INTEGER NOT NULL,
    decided_at    INTEGER,
    address       TEXT    NOT NULL DEFAULT ''
);
INSERT INTO bridge_requests_new SELECT id, peer_home_id, name, want, status, created_at, decided_at, address
    FROM bridge_requests;
DROP TABLE bridge_requests;
ALTER TABLE bridge_requests_new RENAME TO bridge_requests;
CREATE INDEX bridge_requests_by_peer ON bridge_requests (peer_home_id, created_at);
