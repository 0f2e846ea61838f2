-- The home whose bridge brought a message or an input here (NULL: this home's own). For an
-- entry of a room of another home it is the room's home, not its author's: the bridge that
-- carried it decides (its grant, its switch, its revocation); the author is attribution.
-- Only what is still waiting is read by it, so only that is filled in.
ALTER TABLE messages ADD COLUMN via_home TEXT;
ALTER TABLE inputs ADD COLUMN via_home TEXT;
UPDATE messages
SET via_home = COALESCE((SELECT peer_home_id FROM bridge_receipts r WHERE r.message_id = messages.id LIMIT 1),
                        source_host)
WHERE status = 'pending' AND COALESCE(source_host, '') <> '';
UPDATE inputs
SET via_home = COALESCE((SELECT m.via_home FROM messages m WHERE m.id = inputs.message_id), source_host)
WHERE turn_id IS NULL AND COALESCE(source_host, '') <> '';
