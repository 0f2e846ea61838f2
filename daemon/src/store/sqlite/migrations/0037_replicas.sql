-- The kikid processes serving the home, each kept fresh by its heartbeat (a SQLite home has
-- one: its file is locked by it).
CREATE TABLE replicas (
    id TEXT PRIMARY KEY,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    bridge_listen TEXT NOT NULL,
    started_at INTEGER NOT NULL,
    heartbeat_at INTEGER NOT NULL
);
