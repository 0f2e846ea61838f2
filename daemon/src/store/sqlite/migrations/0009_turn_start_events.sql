-- Where the thread's event log stood when a turn started (its newest event's seq): a
-- ThreadWait without a cursor starts there, so it sees that turn's events and nothing older.
ALTER TABLE turns ADD COLUMN events_before INTEGER;
-- Each thread's latest turn (the only one read) gets it from the log: after the previous
-- turn's terminal event, or after the thread's first event for a first turn.
UPDATE turns SET events_before = COALESCE(
    CASE WHEN seq = 1
        THEN (SELECT MIN(e.seq) FROM events e WHERE e.thread_id = turns.thread_id)
        ELSE (SELECT MAX(e.seq) FROM events e
              WHERE e.thread_id = turns.thread_id AND e.kind = 'terminal'
                AND e.turn_id = (SELECT p.id FROM turns p WHERE p.thread_id = turns.thread_id AND p.seq = turns.seq - 1))
    END, 0)
WHERE seq = (SELECT MAX(t.seq) FROM turns t WHERE t.thread_id = turns.thread_id);
