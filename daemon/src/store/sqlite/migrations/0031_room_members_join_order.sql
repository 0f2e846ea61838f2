-- The roster keeps the order members joined, also for two that joined in one millisecond:
-- each member gets the next number of its room. Members from before keep 0 and their
-- order by time.
ALTER TABLE room_members ADD COLUMN joined INTEGER NOT NULL DEFAULT 0;
