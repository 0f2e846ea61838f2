-- An outbound bridge that a ping found revoked by its target's owner (not by this home's):
-- its messages still accepted there end `rejected` (`bridge_revoked`) instead of staying
-- `accepted` unasked, also after a restart.
ALTER TABLE bridges ADD COLUMN revoked_by_peer INTEGER NOT NULL DEFAULT 0;
