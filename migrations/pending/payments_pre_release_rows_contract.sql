-- +goose NO TRANSACTION
-- +goose Up

-- The contract step of 00050 (payments_backfill_pre_release_rows), one
-- release after it. 00050's release finds a payment's audit records by
-- their payment's created_at alone, and treats every hold as named; the
-- release before it still read records without a created_at through
-- payment_transitions_earlier_idx, and kept held_by honest for the release
-- before 00023 with a trigger.
DROP TRIGGER IF EXISTS payments_keep_held_by_honest ON payments;
DROP FUNCTION IF EXISTS payments_keep_held_by_honest();
DROP INDEX CONCURRENTLY IF EXISTS payment_transitions_earlier_idx;

-- +goose Down
CREATE INDEX CONCURRENTLY IF NOT EXISTS payment_transitions_earlier_idx
    ON payment_transitions (payment_id, id) WHERE payment_created_at IS NULL;
