-- The kikid processes serving the home: a team home's replicas, each kept fresh by its
-- heartbeat. What a replica claimed is its own while its heartbeat is younger than the lease.
CREATE TABLE replicas (
    id TEXT PRIMARY KEY,
    host TEXT NOT NULL,
    pid BIGINT NOT NULL,
    bridge_listen TEXT NOT NULL,
    started_at BIGINT NOT NULL,
    heartbeat_at BIGINT NOT NULL
);
