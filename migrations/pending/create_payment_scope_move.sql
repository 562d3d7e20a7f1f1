-- +goose NO TRANSACTION
-- +goose Up

-- Second release of the payments' scope rename (00024; issue 16). It ships
-- with the code that writes new keys under 'create_payment'
-- (payments.OperationCreate and OperationCreateNext swap; Aliases() keeps
-- the old name), once no release that reads 'payments.create' only (the
-- ones before 00024) is running: the release before it reads both names.
-- It moves every stored key to the new name, a thousand at a time, each
-- batch its own transaction, so that no long lock is held. The fingerprint
-- keeps the old name's letters (payments.fingerprintName), so the moved
-- keys still match their retries.
-- First, one scope of both names: a key claimed under one is never claimed
-- again under the other while releases that write different names run
-- side by side (the engine's claim does nothing on any unique index).
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS idempotency_keys_create_payment_scope_key
    ON idempotency_keys (tenant_id, idempotency_key)
    WHERE operation IN ('payments.create', 'create_payment');

-- +goose StatementBegin
DO $$
DECLARE moved integer;
BEGIN
    LOOP
        UPDATE idempotency_keys SET operation = 'create_payment'
        WHERE id IN (SELECT id FROM idempotency_keys WHERE operation = 'payments.create' LIMIT 1000);
        GET DIAGNOSTICS moved = ROW_COUNT;
        EXIT WHEN moved = 0;
        COMMIT;
    END LOOP;
END $$;
-- +goose StatementEnd

-- +goose Down
-- (The keys stay moved: the release before reads both names.)
DROP INDEX CONCURRENTLY IF EXISTS idempotency_keys_create_payment_scope_key;
