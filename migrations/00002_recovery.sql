-- +goose Up

-- Recovery bookkeeping of the reconciler: per-payment backoff, and the mark
-- of a payment it gave up on (kept PROCESSING for a person to review; never
-- deleted, never guessed).
ALTER TABLE payments
    ADD COLUMN recovery_attempts   integer     NOT NULL DEFAULT 0,
    ADD COLUMN recovery_next_at    timestamptz NOT NULL DEFAULT '-infinity',
    ADD COLUMN recovery_last_error text,
    ADD COLUMN manual_review_at    timestamptz;

-- What the reconciler looks for: outcomes that may have moved money.
CREATE INDEX payments_recovery_due_idx ON payments (recovery_next_at)
    WHERE state IN ('PROVIDER_REQUEST_SENT', 'UNKNOWN_REQUIRES_RECOVERY') AND manual_review_at IS NULL;

-- +goose Down
DROP INDEX payments_recovery_due_idx;
ALTER TABLE payments
    DROP COLUMN recovery_attempts,
    DROP COLUMN recovery_next_at,
    DROP COLUMN recovery_last_error,
    DROP COLUMN manual_review_at;
