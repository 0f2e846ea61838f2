-- Idempotency keys are pruned oldest first in insertion (rowid) order, which is their age
-- order, so the index by age is no longer kept: every accepted message wrote one entry more.
DROP INDEX idempotency_keys_by_age;
