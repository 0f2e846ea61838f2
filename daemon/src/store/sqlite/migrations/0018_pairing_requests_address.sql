-- Where a pairing request came from (the peer's IP address): shown to the owner, and the
-- requests of one address (or IPv6 /64) are capped, so fresh keys from one machine cannot
-- fill the list of requests waiting for the owner.
ALTER TABLE bridge_requests ADD COLUMN address TEXT NOT NULL DEFAULT '';
