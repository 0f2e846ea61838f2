-- An entry that expired at its source without a word from its target (unreachable as the
-- retry window ended) stays due (`next_attempt_at`) until the target answers the question
-- of the window's end: the target may have delivered the message before the window ended
-- and lost every answer, and the entry then says so. Every other entry that ended is due
-- never; so were those that ended before this migration.
UPDATE outbox SET next_attempt_at = 9223372036854775807 WHERE status IN ('delivered', 'rejected', 'expired');
CREATE INDEX outbox_unsettled ON outbox (peer_home_id, next_attempt_at)
    WHERE status = 'expired' AND next_attempt_at < 9223372036854775807;
