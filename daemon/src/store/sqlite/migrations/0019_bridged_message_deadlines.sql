-- A bridged message's deadline: the end of its source's retry window (as the send call
-- said how much of it was left). Not yet in a prompt by then, and not confirmed by a
-- follow-up from a source that knows it arrived, it is never delivered: it expires here as
-- its source declares it expired. NULL: no deadline (local messages, confirmed ones).
ALTER TABLE messages ADD COLUMN deadline INTEGER;
