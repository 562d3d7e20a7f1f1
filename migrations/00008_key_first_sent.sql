-- +goose Up

-- When the first request for a key's resource actually left for the
-- provider. The provider's key window (PROVIDER_KEY_TTL) runs from here, not
-- from the key's creation: a payment refused at creation and first sent a
-- day later may still be sent again by the same key while the provider
-- remembers it. Existing keys take their creation time: a window measured
-- from earlier closes sooner, which only ever means "look up, don't send".
ALTER TABLE idempotency_keys ADD COLUMN first_sent_at timestamptz;
UPDATE idempotency_keys SET first_sent_at = created_at WHERE recovery_next_at IS NOT NULL OR response_status IS NOT NULL;

-- Clean-up erases expired bodies: find them without reading every kept key.
CREATE INDEX idempotency_keys_erasable_idx ON idempotency_keys (completed_at)
    WHERE response_body IS NOT NULL;

-- +goose Down
DROP INDEX idempotency_keys_erasable_idx;
ALTER TABLE idempotency_keys DROP COLUMN first_sent_at;
