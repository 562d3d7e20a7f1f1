-- +goose NO TRANSACTION
-- +goose Up

-- Money safety III (issue 17) and operations as modules (issue 16).
--
-- A lookup's "not found" is certain only once the provider's lookup lag has
-- passed since the latest request that may have reached it. The key's
-- first_sent_at cannot say when that was: it is the first send (the
-- provider's key window runs from it), and a refusal clears it, although a
-- refused request may have been processed all the same.
--
-- Both times are the resource's provider history, so they move to the
-- resource's row, where the money flow (internal/providerflow) writes them
-- with the state machine's moves, in the same statement: the idempotency
-- engine keeps keys, not providers.
--   first_sent_at: when the first request that counts left (cleared by a
--     refusal); the provider's key window runs from it.
--   last_sent_at: when the latest request left, refused or not; never
--     cleared.
--
-- Expand only: nullable columns the previous release neither reads nor
-- writes, and a trigger that keeps writing what it still reads (README,
-- "Migrations"). The key's first_sent_at and abandon_at, which this release
-- no longer writes, are dropped one release later
-- (migrations/pending/drop_idempotency_keys_provider_times.sql).
--
-- No transaction: each statement commits on its own, so the migration never
-- holds the lock of one table while it waits for another. In one
-- transaction it would hold payments' (ALTER TABLE) while the trigger
-- waited for idempotency_keys, which a running claim holds while it waits
-- for payments: a deadlock, and a 500 for the previous release
-- (TestRollingUpgrade). Every statement may run again after a failure.
ALTER TABLE payments
    ADD COLUMN IF NOT EXISTS first_sent_at timestamptz,
    ADD COLUMN IF NOT EXISTS last_sent_at timestamptz;
ALTER TABLE refunds
    ADD COLUMN IF NOT EXISTS first_sent_at timestamptz,
    ADD COLUMN IF NOT EXISTS last_sent_at timestamptz;

-- An unfinished resource that left its initial state may have sent a
-- request at any time until now: now is the one bound that is never too
-- early. Its first send that counts is the key's.
UPDATE payments p SET first_sent_at = k.first_sent_at, last_sent_at = now()
FROM idempotency_keys k
WHERE k.resource_type = 'payment' AND k.resource_id = p.id
  AND k.response_status IS NULL AND k.completed_at IS NULL AND p.state <> 'RECEIVED';
UPDATE refunds r SET first_sent_at = k.first_sent_at, last_sent_at = now()
FROM idempotency_keys k
WHERE k.resource_type = 'refund' AND k.resource_id = r.id
  AND k.response_status IS NULL AND k.completed_at IS NULL AND r.state <> 'RECEIVED';

-- A refund has no canceled end, so its key is never abandoned; 00009 gave
-- the unfinished ones an abandon_at anyway, which made the reconciler look
-- at a refund waiting for its client again and again (the previous release
-- booked the next look of such a key at its abandon_at, long past).
UPDATE idempotency_keys SET abandon_at = NULL
WHERE operation = 'create_refund' AND abandon_at IS NOT NULL;

-- This release books a payment key's first look (its abandon time) in
-- recovery_next_at only. The previous release, while it still runs beside
-- it, reads abandon_at of the keys it takes over: a trigger writes it, for
-- the payment keys, until the contract step drops both.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION idempotency_keys_abandon_at() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.abandon_at := NEW.recovery_next_at;
    RETURN NEW;
END
$$;
-- +goose StatementEnd
CREATE OR REPLACE TRIGGER idempotency_keys_abandon_at
    BEFORE INSERT ON idempotency_keys
    FOR EACH ROW WHEN (NEW.operation = 'payments.create' AND NEW.abandon_at IS NULL)
    EXECUTE FUNCTION idempotency_keys_abandon_at();

-- +goose Down
DROP TRIGGER IF EXISTS idempotency_keys_abandon_at ON idempotency_keys;
DROP FUNCTION IF EXISTS idempotency_keys_abandon_at();
ALTER TABLE refunds DROP COLUMN IF EXISTS first_sent_at, DROP COLUMN IF EXISTS last_sent_at;
ALTER TABLE payments DROP COLUMN IF EXISTS first_sent_at, DROP COLUMN IF EXISTS last_sent_at;
