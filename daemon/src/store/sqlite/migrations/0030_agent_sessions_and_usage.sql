-- A thread's agent session (`claude`: resumed at every turn), and what each turn's agent
-- reported it used: tokens and cost.
CREATE TABLE agent_sessions (
    thread_id TEXT PRIMARY KEY REFERENCES threads (id),
    session_id TEXT NOT NULL,
    updated_at INTEGER NOT NULL
) STRICT;
ALTER TABLE turns ADD COLUMN input_tokens INTEGER;
ALTER TABLE turns ADD COLUMN output_tokens INTEGER;
ALTER TABLE turns ADD COLUMN cost_usd REAL;
