-- Bridged messages waiting for a turn with a deadline, by deadline: a sweep expires those
-- whose deadline passed (and writes their receipts) when it passes, not at the target
-- thread's next turn. Deadlines grow with time, so a message's entry lands on the index's
-- last page; it leaves when the message is delivered, confirmed or expired.
CREATE INDEX messages_by_deadline ON messages (deadline) WHERE status = 'pending' AND deadline IS NOT NULL;
