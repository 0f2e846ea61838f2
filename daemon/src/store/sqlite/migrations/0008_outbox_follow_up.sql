-- An entry the target accepted without delivering it (`accepted`) is followed up until the
-- target delivers or refuses it: the worker's due list covers both states.
DROP INDEX outbox_due;
CREATE INDEX outbox_due ON outbox (next_attempt_at) WHERE status IN ('pending', 'accepted');
