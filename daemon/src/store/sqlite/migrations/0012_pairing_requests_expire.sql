-- A pairing request the target's owner has not decided within `[bridge] request_expiry`
-- expires: it no longer counts against the requests that may wait, and the source's
-- outbound bridge shows it. SQLite cannot change a CHECK constraint in place: both tables
-- are rebuilt.
CREATE TABLE bridge_requests_new (
    id            TEXT    PRIMARY KEY,
    peer_home_id  TEXT    NOT NULL,
    name          TEXT    NOT NULL,
    want          TEXT    NOT NULL,
    status        TEXT    NOT NULL CHECK (status IN ('pending', 'approved', 'rejected', 'expired')),
    created_at    INTEGER NOT NULL,
    decided_at    INTEGER
);
INSERT INTO bridge_requests_new SELECT id, peer_home_id, name, want, status, created_at, decided_at
    FROM bridge_requests;
DROP TABLE bridge_requests;
ALTER TABLE bridge_requests_new RENAME TO bridge_requests;
CREATE INDEX bridge_requests_by_peer ON bridge_requests (peer_home_id, created_at);

CREATE TABLE bridges_new (
    id             TEXT    PRIMARY KEY,
    direction      TEXT    NOT NULL CHECK (direction IN ('inbound', 'outbound')),
    peer_home_id   TEXT    NOT NULL,
    alias          TEXT    NOT NULL DEFAULT '',
    address        TEXT    NOT NULL DEFAULT '',
    state          TEXT    NOT NULL
                   CHECK (state IN ('requested', 'active', 'disabled', 'rejected', 'expired', 'revoked')),
    -- Comma-separated: read, send, wake, wait.
    permissions    TEXT    NOT NULL DEFAULT '',
    -- Comma-separated workspace ids; empty means every workspace.
    workspaces     TEXT    NOT NULL DEFAULT '',
    request_id     TEXT    NOT NULL DEFAULT '',
    created_at     INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL,
    last_success   INTEGER,
    last_error     TEXT    NOT NULL DEFAULT '',
    last_error_at  INTEGER,
    UNIQUE (direction, peer_home_id)
);
INSERT INTO bridges_new SELECT id, direction, peer_home_id, alias, address, state, permissions, workspaces,
    request_id, created_at, updated_at, last_success, last_error, last_error_at FROM bridges;
DROP TABLE bridges;
ALTER TABLE bridges_new RENAME TO bridges;
