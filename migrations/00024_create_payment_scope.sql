-- +goose NO TRANSACTION
-- +goose Up

-- The payments' key scope is renamed from 'payments.create' to
-- 'create_payment' (issue 16: one naming scheme, verb_noun), in three
-- releases, so that a retry during a rolling upgrade always finds its key:
--   1. this release writes 'payments.create' and reads both names;
--   2. the next writes 'create_payment', reads both, and moves the stored
--      keys to the new name (a contract step: the release before this one,
--      which reads the old name only, is gone by then);
--   3. the one after reads 'create_payment' only, and drops this index.
-- While both names may be written (releases 1 and 2 side by side), one
-- (tenant, key) must never be claimed twice under two names: this unique
-- index holds the keys of both names as one scope, and the engine's claim
-- (ON CONFLICT DO NOTHING, any unique index) answers a key met under the
-- other name as a retry.
--
-- Expand only: an index the previous release does not need; it claims
-- under 'payments.create' only, so it never meets it.
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS idempotency_keys_create_payment_scope_key
    ON idempotency_keys (tenant_id, idempotency_key)
    WHERE operation IN ('payments.create', 'create_payment');

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS idempotency_keys_create_payment_scope_key;
