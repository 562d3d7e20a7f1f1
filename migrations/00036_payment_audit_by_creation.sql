-- +goose NO TRANSACTION
-- +goose Up

-- payment_transitions (issue 22): each record repeats its payment's
-- created_at (the state machine writes it, statemachine.Table.CreatedAt),
-- and a payment's audit is found by (payment_created_at, payment_id): a
-- new payment's three records go to that index's right edge. The primary
-- key (payment_id, id) took them at random leaves (payment ids are
-- random), the first change of each after a checkpoint a whole page in the
-- WAL; at 2 million payments it was the largest random index a payment
-- writes (457 MiB, docs/BENCHMARKS.md).
--
-- The records written before keep an index of their own, (payment_id, id)
-- for those without payment_created_at, which an instance of the previous
-- release, during a rolling upgrade, still writes. The table has no
-- primary key then: nothing reads a record by its id, which a sequence
-- makes unique. A payment's audit (docs/operations.md, "A payment's
-- audit trail"; payments.AuditSQL) reads both indexes.
--
-- Built CONCURRENTLY, without a transaction; each step may be run again
-- (an invalid index a failed build left is dropped first). Dropping the
-- primary key is a catalog change under a brief exclusive lock.
ALTER TABLE payment_transitions ADD COLUMN IF NOT EXISTS payment_created_at timestamptz;
DROP INDEX CONCURRENTLY IF EXISTS payment_transitions_created_idx;
CREATE INDEX CONCURRENTLY payment_transitions_created_idx
    ON payment_transitions (payment_created_at, payment_id, id) WHERE payment_created_at IS NOT NULL;
DROP INDEX CONCURRENTLY IF EXISTS payment_transitions_earlier_idx;
CREATE INDEX CONCURRENTLY payment_transitions_earlier_idx
    ON payment_transitions (payment_id, id) WHERE payment_created_at IS NULL;
ALTER TABLE payment_transitions DROP CONSTRAINT IF EXISTS payment_transitions_payment_pkey;

-- +goose Down
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_index
               WHERE indexrelid = to_regclass('payment_transitions_payment_pkey') AND NOT indisvalid) THEN
        DROP INDEX payment_transitions_payment_pkey;
    END IF;
END
$$;
-- +goose StatementEnd
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS payment_transitions_payment_pkey ON payment_transitions (payment_id, id);
-- +goose StatementBegin
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_constraint
                   WHERE conrelid = 'payment_transitions'::regclass AND conname = 'payment_transitions_payment_pkey') THEN
        ALTER TABLE payment_transitions
            ADD CONSTRAINT payment_transitions_payment_pkey PRIMARY KEY USING INDEX payment_transitions_payment_pkey;
    END IF;
END
$$;
-- +goose StatementEnd
DROP INDEX CONCURRENTLY IF EXISTS payment_transitions_earlier_idx;
DROP INDEX CONCURRENTLY IF EXISTS payment_transitions_created_idx;
ALTER TABLE payment_transitions DROP COLUMN IF EXISTS payment_created_at;
