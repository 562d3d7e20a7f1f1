-- +goose Up

-- Clean-up finds finished keys by completion time; gauges count unfinished ones.
CREATE INDEX idempotency_keys_completed_idx ON idempotency_keys (completed_at)
    WHERE completed_at IS NOT NULL;
CREATE INDEX idempotency_keys_unfinished_idx ON idempotency_keys (created_at)
    WHERE response_status IS NULL;
-- Payments a person must look at.
CREATE INDEX payments_manual_review_idx ON payments (manual_review_at)
    WHERE manual_review_at IS NOT NULL;

-- +goose Down
DROP INDEX payments_manual_review_idx;
DROP INDEX idempotency_keys_unfinished_idx;
DROP INDEX idempotency_keys_completed_idx;
