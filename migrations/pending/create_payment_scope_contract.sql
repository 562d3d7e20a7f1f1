-- +goose NO TRANSACTION
-- +goose Up

-- Third and last release of the payments' scope rename (00024, 00027;
-- issue 16). It ships with the code that reads keys under 'create_payment'
-- only (payments' Aliases gone), once no instance of the release before
-- 00027 runs: that one wrote keys under 'payments.create' while 00027's
-- release rolled out. Those keys move now, by 00027's procedure (a thousand
-- ids at a time), which then goes; and so does the index that made one
-- scope of both names goes: every key is under one name, and the scope's
-- own unique index (tenant, operation, key) is enough.
CALL idempotency_keys_move_scope('payments.create', 'create_payment');
DROP PROCEDURE IF EXISTS idempotency_keys_move_scope(text, text);
DROP INDEX CONCURRENTLY IF EXISTS idempotency_keys_create_payment_scope_key;

-- +goose Down
-- (The procedure is not brought back: nothing calls it after this step.)
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS idempotency_keys_create_payment_scope_key
    ON idempotency_keys (tenant_id, idempotency_key)
    WHERE operation IN ('payments.create', 'create_payment');
