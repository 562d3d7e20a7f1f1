-- +goose NO TRANSACTION
-- +goose Up

-- Customer authentication (3-D Secure): a payment the provider holds until
-- the customer authenticates is REQUIRES_ACTION. Its create key's answer
-- is stored there (201 REQUIRES_ACTION); the outcome that comes later, by
-- the customer's return, the provider's webhook or the reconciler's look,
-- is a move of the payment: COMPLETED, DECLINED (authentication_failed),
-- CANCELED (authentication_abandoned) or, for a manual payment,
-- AUTHORIZED.
--
-- Expand only (docs/operations.md, "Migrations"): nullable columns, new
-- moves, a wider CHECK. The previous release never makes such a payment,
-- and reads one it meets as PROCESSING.
--
-- No transaction (like 00018): each statement commits on its own, and may
-- run again after a failure.
ALTER TABLE payments
    -- where the customer is sent once authenticated (the command's
    -- returnUrl), and where the provider's challenge is (nextAction.url)
    ADD COLUMN IF NOT EXISTS return_url text,
    ADD COLUMN IF NOT EXISTS next_action_url text;

ALTER TABLE payments DROP CONSTRAINT IF EXISTS payments_state_check_v49;
ALTER TABLE payments ADD CONSTRAINT payments_state_check_v49 CHECK (state IN (
    'RECEIVED', 'PROVIDER_REQUEST_SENT', 'COMPLETED', 'DECLINED',
    'FAILED_RETRYABLE', 'UNKNOWN_REQUIRES_RECOVERY', 'CANCELED',
    'AUTHORIZED', 'CAPTURE_REQUESTED', 'VOID_REQUESTED', 'CANCEL_REQUESTED',
    'REQUIRES_ACTION')) NOT VALID;
ALTER TABLE payments VALIDATE CONSTRAINT payments_state_check_v49;
ALTER TABLE payments DROP CONSTRAINT IF EXISTS payments_state_check_v18;

INSERT INTO state_machine_moves (machine, from_state, to_state) VALUES
    ('payment', 'PROVIDER_REQUEST_SENT', 'REQUIRES_ACTION'),
    ('payment', 'UNKNOWN_REQUIRES_RECOVERY', 'REQUIRES_ACTION'),
    ('payment', 'REQUIRES_ACTION', 'COMPLETED'),
    ('payment', 'REQUIRES_ACTION', 'DECLINED'),
    ('payment', 'REQUIRES_ACTION', 'CANCELED'),
    ('payment', 'REQUIRES_ACTION', 'AUTHORIZED')
ON CONFLICT DO NOTHING;

-- +goose Down
DELETE FROM idempotency_keys WHERE resource_type = 'payment_authentication';
DELETE FROM state_machine_moves WHERE machine = 'payment'
    AND (from_state = 'REQUIRES_ACTION' OR to_state = 'REQUIRES_ACTION');
ALTER TABLE payments ADD CONSTRAINT payments_state_check_v18 CHECK (state IN (
    'RECEIVED', 'PROVIDER_REQUEST_SENT', 'COMPLETED', 'DECLINED',
    'FAILED_RETRYABLE', 'UNKNOWN_REQUIRES_RECOVERY', 'CANCELED',
    'AUTHORIZED', 'CAPTURE_REQUESTED', 'VOID_REQUESTED', 'CANCEL_REQUESTED'));
ALTER TABLE payments DROP CONSTRAINT IF EXISTS payments_state_check_v49;
ALTER TABLE payments
    DROP COLUMN IF EXISTS next_action_url,
    DROP COLUMN IF EXISTS return_url;
