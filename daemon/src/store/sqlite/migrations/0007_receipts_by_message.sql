-- A bridged message that waited at its thread gets a `delivered` receipt when a turn takes
-- it: the receipts of the messages a turn takes are found by message id.
CREATE INDEX bridge_receipts_by_message ON bridge_receipts (message_id);
