-- An inbound bridge's access can be turned off and back on by the target's owner
-- (`disabled`). SQLite cannot change a CHECK constraint in place: the table is rebuilt.
CREATE TABLE bridges_new (
    id             TEXT    PRIMARY KEY,
    direction      TEXT    NOT NULL CHECK (direction IN ('inbound', 'outbound')),
    peer_home_id   TEXT    NOT NULL,
    alias          TEXT    NOT NULL DEFAULT '',
    address        TEXT    NOT NULL DEFAULT '',
    state          TEXT    NOT NULL CHECK (state IN ('requested', 'active', 'disabled', 'rejected', 'revoked')),
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
