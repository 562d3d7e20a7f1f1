-- +goose NO TRANSACTION
-- +goose Up

-- payment_transitions (issue 22): a payment's audit is found by its
-- payment's created_at alone, and the payment's id is tested on the rows
-- that index finds. The index of 00036 keyed (payment_created_at,
-- payment_id, id): a 56-byte entry per record, three per payment, for a
-- key the creation time already all but singles out (microseconds; the few
-- payments created in the same microsecond share a posting list). An
-- entry of the creation time alone is 16 bytes: 120 bytes less WAL per
-- payment (bench/walflow: 5,833 against 5,711), an index 0.6 times the
-- size, and a payment's three entries, being equal, are deduplicated into
-- one. Its new entries still go to the right edge.
--
-- The statement that reads the audit (payments.AuditSQL) names the
-- creation time and the payment's id, so it reads through either index:
-- the new one is built before the old one is dropped, and an instance of
-- the previous release, during a rolling upgrade, reads and writes as
-- before. Built CONCURRENTLY, without a transaction; each step may be run
-- again: an invalid index a failed build left is dropped first (a brief
-- exclusive lock), a valid one is kept, so that a run again after the
-- build never leaves the audit without an index while it rebuilds.
--
-- Payments created in the same microsecond share their entries: a
-- payment's audit reads the records of all of them. A service's clock
-- makes that a handful at most; rows imported with one created_at for many
-- payments (a frozen clock, a coarse bulk load) would make each of their
-- audits read all their records.
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_index
               WHERE indexrelid = to_regclass('payment_transitions_by_creation_idx') AND NOT indisvalid) THEN
        DROP INDEX payment_transitions_by_creation_idx;
    END IF;
END
$$;
-- +goose StatementEnd
CREATE INDEX CONCURRENTLY IF NOT EXISTS payment_transitions_by_creation_idx
    ON payment_transitions (payment_created_at) WHERE payment_created_at IS NOT NULL;
DROP INDEX CONCURRENTLY IF EXISTS payment_transitions_created_idx;

-- +goose Down
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_index
               WHERE indexrelid = to_regclass('payment_transitions_created_idx') AND NOT indisvalid) THEN
        DROP INDEX payment_transitions_created_idx;
    END IF;
END
$$;
-- +goose StatementEnd
CREATE INDEX CONCURRENTLY IF NOT EXISTS payment_transitions_created_idx
    ON payment_transitions (payment_created_at, payment_id, id) WHERE payment_created_at IS NOT NULL;
DROP INDEX CONCURRENTLY IF EXISTS payment_transitions_by_creation_idx;
