-- The process group of a turn's `exec` agent ("PGID STARTED BOOT_ID", see
-- executors/agent.rs), recorded while the turn runs: after a crash, startup recovery stops
-- the agents of the turns it fails.
ALTER TABLE turns ADD COLUMN agent TEXT;
