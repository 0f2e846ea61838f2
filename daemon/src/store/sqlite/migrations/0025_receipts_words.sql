-- Both homes word a bridged message's state alike: one the target holds, not yet in a turn,
-- is `accepted` there as at its source (it was `pending` at the target).
UPDATE bridge_receipts SET status = 'accepted' WHERE status = 'pending';
-- A refusal's receipt has no message of this home's (`message_id` stays empty: refusals are
-- found by key), but shows the id its source named the message by.
ALTER TABLE bridge_receipts ADD COLUMN named_id TEXT NOT NULL DEFAULT '';
