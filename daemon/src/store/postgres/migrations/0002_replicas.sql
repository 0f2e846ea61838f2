-- The kikid processes serving the home: a team home's replicas, each kept fresh by its
-- heartbeat, and the replica that claimed each turn: a running turn is its replica's while
-- that replica's heartbeat is younger than the lease. A turn's token is kept hashed, so
-- that any replica knows the turn an agent's call comes from.
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
ALTER TABLE turns ADD COLUMN token_hash TEXT;
CREATE INDEX turns_token ON turns (token_hash);
