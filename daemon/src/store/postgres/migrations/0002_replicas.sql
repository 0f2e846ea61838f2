-- The kikid processes serving the home: a team home's replicas, each kept fresh by its
-- heartbeat, and the replica that claimed each turn: a running turn is its replica's while
-- that replica's heartbeat is younger than the lease.
CREATE TABLE replicas (
    id TEXT PRIMARY KEY,
    host TEXT NOT NULL,
    home TEXT NOT NULL,
    pid BIGINT NOT NULL,
    bridge_listen TEXT NOT NULL,
    started_at BIGINT NOT NULL,
    heartbeat_at BIGINT NOT NULL
);
ALTER TABLE turns ADD COLUMN replica_id TEXT NOT NULL DEFAULT '';
