-- Keys of bridged sends whose source gave up (its retry window over) before any call of
-- them arrived here: a call still on its way (QUIC delivering an attempt given up earlier)
-- is refused as expired instead of taken. Pruned with the idempotency keys.
CREATE TABLE given_up_keys (
    scope       TEXT    NOT NULL,
    key         TEXT    NOT NULL,
    created_at  INTEGER NOT NULL,
    PRIMARY KEY (scope, key)
) WITHOUT ROWID;
