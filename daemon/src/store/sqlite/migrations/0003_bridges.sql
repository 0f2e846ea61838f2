-- Bridges between homes: pairing requests filed with this home, and both directions of
-- approved links.

CREATE TABLE bridge_requests (
    id            TEXT    PRIMARY KEY,
    peer_home_id  TEXT    NOT NULL,
    name          TEXT    NOT NULL,
    want          TEXT    NOT NULL,
    status        TEXT    NOT NULL CHECK (status IN ('pending', 'approved', 'rejected')),
    created_at    INTEGER NOT NULL,
    decided_at    INTEGER
);

CREATE INDEX bridge_requests_by_peer ON bridge_requests (peer_home_id, created_at);

CREATE TABLE bridges (
    id             TEXT    PRIMARY KEY,
    direction      TEXT    NOT NULL CHECK (direction IN ('inbound', 'outbound')),
    peer_home_id   TEXT    NOT NULL,
    alias          TEXT    NOT NULL DEFAULT '',
    address        TEXT    NOT NULL DEFAULT '',
    state          TEXT    NOT NULL CHECK (state IN ('requested', 'active', 'rejected', 'revoked')),
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
