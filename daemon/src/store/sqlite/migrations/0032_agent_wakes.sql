-- The loop guard between two threads: how often their agents' messages woke one another
-- since the owner last gave either of them input. A pair is stored once, its ids in order.
CREATE TABLE agent_wakes (
    thread_a TEXT NOT NULL,
    thread_b TEXT NOT NULL,
    count INTEGER NOT NULL,
    PRIMARY KEY (thread_a, thread_b)
) WITHOUT ROWID, STRICT;
CREATE INDEX agent_wakes_by_b ON agent_wakes (thread_b);
