-- +goose NO TRANSACTION
-- +goose Up

-- Third and last release of the payments' scope rename (00024, 00027;
-- issue 16), the contract step that waited in migrations/pending for one
-- release. It ships with the code that reads keys under 'create_payment'
-- only (payments' Aliases gone); no instance of the release before 00027
-- runs any more (a rolling upgrade skips no release), but that release
-- wrote keys under 'payments.create' while 00027's release rolled out.
-- Those keys move now, by 00027's procedure (a thousand ids at a time),
-- which then goes; and so does the index that made one scope of both
-- names: every key is under one name, and the scope's own unique index
-- (tenant, operation, key) is enough. The release before this one claims
-- with ON CONFLICT DO NOTHING over any unique index, so it keeps working
-- without the dropped one.
CALL idempotency_keys_move_scope('payments.create', 'create_payment');
DROP PROCEDURE IF EXISTS idempotency_keys_move_scope(text, text);
DROP INDEX CONCURRENTLY IF EXISTS idempotency_keys_create_payment_scope_key;

-- +goose Down
-- 00027's schema again (the keys stay under the new name, which the
-- release before reads).
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS idempotency_keys_create_payment_scope_key
    ON idempotency_keys (tenant_id, idempotency_key)
    WHERE operation IN ('payments.create', 'create_payment');
-- +goose StatementBegin
CREATE OR REPLACE PROCEDURE idempotency_keys_move_scope(from_name text, to_name text)
LANGUAGE plpgsql AS $$
DECLARE
    next_id bigint := (SELECT min(id) FROM idempotency_keys);
    last_id bigint := (SELECT max(id) FROM idempotency_keys);
BEGIN
    WHILE next_id <= last_id LOOP
        UPDATE idempotency_keys SET operation = to_name
        WHERE id >= next_id AND id < next_id + 1000 AND operation = from_name;
        next_id := next_id + 1000;
        COMMIT;
    END LOOP;
END $$;
-- +goose StatementEnd
