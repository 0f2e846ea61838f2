-- The home this store belongs to: its identity's id, recorded by the first kikid that opens
-- it, so that a replica started with another identity key is refused instead of serving the
-- store's threads and bridges as another home.
CREATE TABLE home (
    only_row INTEGER PRIMARY KEY CHECK (only_row = 1),
    home_id TEXT NOT NULL
);
