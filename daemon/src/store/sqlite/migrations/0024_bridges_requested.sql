-- What an outbound bridge's home asked its target for (`kiki bridge request --want`), shown
-- beside what the target granted; empty for inbound bridges and those made before.
ALTER TABLE bridges ADD COLUMN requested TEXT NOT NULL DEFAULT '';
