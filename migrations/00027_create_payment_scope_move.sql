-- +goose NO TRANSACTION
-- +goose Up

-- Second release of the payments' scope rename (00024; issue 16). It ships
-- with the code that writes new keys under 'create_payment'
-- (payments.OperationCreate; the old name is its alias), and runs beside the
-- release before it, which reads both names and writes the old one.
--
-- First, one scope of both names: a key claimed under one is never claimed
-- again under the other while the two releases run side by side (the
-- engine's claim does nothing on any unique index, and answers the key as a
-- retry).
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS idempotency_keys_create_payment_scope_key
    ON idempotency_keys (tenant_id, idempotency_key)
    WHERE operation IN ('payments.create', 'create_payment');

-- Then every stored key moves to the new name, through the primary key a
-- thousand ids at a time, each batch its own transaction, so that no long
-- lock is held and no batch reads what the ones before it moved. The
-- fingerprint keeps the old name's letters (payments.fingerprintName), so
-- a moved key still matches its retries. Keys the release before claims
-- under the old name while this one rolls out are moved again, by the same
-- procedure, in the third release's step
-- (migrations/pending/create_payment_scope_contract.sql), which drops it.
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
CALL idempotency_keys_move_scope('payments.create', 'create_payment');

-- +goose Down
-- (The keys stay moved: the release before reads both names.)
DROP PROCEDURE IF EXISTS idempotency_keys_move_scope(text, text);
DROP INDEX CONCURRENTLY IF EXISTS idempotency_keys_create_payment_scope_key;
