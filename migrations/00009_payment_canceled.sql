-- +goose Up

-- A payment that never moved money gets an end (CANCELED, final): it frees
-- its merchant reference, and its key gets a stored final answer.
--
-- abandon_at: when the key's first request claimed it, plus the replay
-- window. A key whose resource moved no money (never sent, or refused) and
-- that nobody finished by then is taken over by the reconciler, which ends
-- the resource (after asking the provider, if a request ever left for it).
ALTER TABLE idempotency_keys ADD COLUMN abandon_at timestamptz;
UPDATE idempotency_keys SET abandon_at = created_at + interval '24 hours' WHERE response_status IS NULL;
UPDATE idempotency_keys k SET recovery_next_at = k.abandon_at
FROM payments p
WHERE k.resource_type = 'payment' AND k.resource_id = p.id AND k.response_status IS NULL
  AND k.recovery_next_at IS NULL AND p.state IN ('RECEIVED', 'FAILED_RETRYABLE');

ALTER TABLE payments DROP CONSTRAINT payments_state_check;
ALTER TABLE payments ADD CONSTRAINT payments_state_check CHECK (state IN (
    'RECEIVED', 'PROVIDER_REQUEST_SENT', 'COMPLETED', 'DECLINED',
    'FAILED_RETRYABLE', 'UNKNOWN_REQUIRES_RECOVERY', 'CANCELED'));
INSERT INTO state_machine_moves (machine, from_state, to_state) VALUES
    ('payment', 'RECEIVED', 'CANCELED'),
    ('payment', 'FAILED_RETRYABLE', 'CANCELED');

-- A canceled payment frees its reference, as a declined one does.
DROP INDEX payments_merchant_reference_key;
CREATE UNIQUE INDEX payments_merchant_reference_key
    ON payments (tenant_id, account_id, merchant_reference)
    WHERE state NOT IN ('DECLINED', 'CANCELED');

-- +goose Down
DROP INDEX payments_merchant_reference_key;
CREATE UNIQUE INDEX payments_merchant_reference_key
    ON payments (tenant_id, account_id, merchant_reference)
    WHERE state <> 'DECLINED';
DELETE FROM state_machine_moves WHERE machine = 'payment' AND to_state = 'CANCELED';
ALTER TABLE payments DROP CONSTRAINT payments_state_check;
ALTER TABLE payments ADD CONSTRAINT payments_state_check CHECK (state IN (
    'RECEIVED', 'PROVIDER_REQUEST_SENT', 'COMPLETED', 'DECLINED',
    'FAILED_RETRYABLE', 'UNKNOWN_REQUIRES_RECOVERY'));
ALTER TABLE idempotency_keys DROP COLUMN abandon_at;
