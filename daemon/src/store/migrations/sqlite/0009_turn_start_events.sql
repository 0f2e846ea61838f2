-- Where the thread's event log stood when a turn started (its newest event's seq): a
-- ThreadWait without a cursor starts there, so it sees that turn's events and nothing older.
-- NULL for turns started before this migration.
ALTER TABLE turns ADD COLUMN events_before INTEGER;
