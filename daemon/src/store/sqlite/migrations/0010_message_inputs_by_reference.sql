-- A message's queued input no longer copies the message's content: it is written as '' and
-- a turn reads the message's content (inputs written before keep their copy and read as
-- before). Nothing to change in the tables; the version marks the format, so a kikid that
-- predates it refuses this database instead of giving agents empty messages.
SELECT 1;
