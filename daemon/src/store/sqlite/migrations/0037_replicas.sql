-- The kikid processes serving the home, each kept fresh by its heartbeat (a SQLite home has
-- one: its file is locked by it), and the replica that claimed each turn: a running turn is
-- its replica's while that replica's heartbeat is younger than the lease.
CREATE TABLE replicas (
    id TEXT PRIMARY KEY,
    host TEXT NOT NULL,
    home TEXT NOT NULL,
    pid INTEGER NOT NULL,
    bridge_listen TEXT NOT NULL,
    started_at INTEGER NOT NULL,
    heartbeat_at INTEGER NOT NULL
);
ALTER TABLE turns ADD COLUMN replica_id TEXT NOT NULL DEFAULT '';
