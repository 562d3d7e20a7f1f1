-- +goose NO TRANSACTION
-- +goose Up

-- Third and last release of the payments' scope rename (00024, 00027;
-- issue 16). It ships with the code that reads keys under 'create_payment'
-- only (payments' Aliases gone), once no instance of the release before
-- 00027 runs: that one wrote keys under 'payments.create' while 00027's
-- release rolled out. Those keys move now, like 00027's, through the
-- primary key a thousand ids at a time; then the index that made one
-- scope of both names goes: every key is under one name, and the scope's
-- own unique index (tenant, operation, key) is enough.
-- +goose StatementBegin
DO $$
DECLARE
    next_id bigint := (SELECT min(id) FROM idempotency_keys);
    last_id bigint := (SELECT max(id) FROM idempotency_keys);
BEGIN
    WHILE next_id <= last_id LOOP
        UPDATE idempotency_keys SET operation = 'create_payment'
        WHERE id >= next_id AND id < next_id + 1000 AND operation = 'payments.create';
        next_id := next_id + 1000;
        COMMIT;
    END LOOP;
END $$;
-- +goose StatementEnd
DROP INDEX CONCURRENTLY IF EXISTS idempotency_keys_create_payment_scope_key;

-- +goose Down
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS idempotency_keys_create_payment_scope_key
    ON idempotency_keys (tenant_id, idempotency_key)
    WHERE operation IN ('payments.create', 'create_payment');
