-- The W3C trace context of the call that made an outbox entry: its attempts, however late
-- and on whichever replica, are spans of that trace. Telemetry only; empty: not traced.
ALTER TABLE outbox ADD COLUMN trace TEXT NOT NULL DEFAULT '';
