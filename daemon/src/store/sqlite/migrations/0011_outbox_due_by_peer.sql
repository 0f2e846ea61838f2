-- The outbox worker lists each peer's due entries on its own, and the per-peer updates (retry
-- now, put off while silent) touch only entries in flight: both walk this index by peer
-- instead of a peer's whole history (the (peer, scope, key) index) or every due entry.
DROP INDEX outbox_due;
CREATE INDEX outbox_due ON outbox (peer_home_id, next_attempt_at) WHERE status IN ('pending', 'accepted');
