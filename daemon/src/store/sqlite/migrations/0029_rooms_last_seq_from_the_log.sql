-- A room's newest seq is read from its log (the end of its primary key), so a post does not
-- rewrite the room's row unless the loop guard's count or the room's state changes.
ALTER TABLE rooms DROP COLUMN last_seq;
