-- What a running turn showed as it happened (the agent's text, its tool calls and their
-- results), kept with the turn: followed live, read after.
CREATE TABLE turn_parts (
    turn_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('text', 'tool', 'tool_result')),
    text TEXT NOT NULL,
    at INTEGER NOT NULL,
    PRIMARY KEY (turn_id, seq)
) WITHOUT ROWID, STRICT;
