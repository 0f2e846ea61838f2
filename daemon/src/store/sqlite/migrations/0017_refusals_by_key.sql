-- A send refused for good is written once at the target, however often its source asks
-- again (its earlier answer lost): refusal receipts, the ones without a message, are found
-- by key. Partial, so accepted messages' receipts pay for no extra index.
CREATE INDEX bridge_receipts_refused_by_key ON bridge_receipts (peer_home_id, key) WHERE message_id = '';
