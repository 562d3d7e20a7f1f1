-- +goose NO TRANSACTION
-- +goose Up

-- Authorize now, capture later (issue 18): manual capture and cancel.
--
-- A payment made with captureMethod "manual" is only authorized by the
-- provider (AUTHORIZED, shown as REQUIRES_CAPTURE) until an operation on it,
-- capture_payment or cancel_payment (internal/authorizations), captures or
-- voids it. While one of them is at the provider, the payment says so
-- (CAPTURE_REQUESTED, VOID_REQUESTED): the move out of AUTHORIZED is the
-- lock that lets one action win, whatever the concurrency. A cancel of a
-- payment that moved no money (never sent, or refused) puts it in
-- CANCEL_REQUESTED, which its key's next owner ends.
--
-- Expand only (README, "Migrations"): nullable columns and columns with a
-- default, new tables, new moves, a wider CHECK. The previous release never
-- sees a manual payment made, and reads one it meets as PROCESSING.
--
-- No transaction (like 00017): each statement commits on its own, so the
-- migration never holds the lock of payments while it waits for another
-- table's. Every statement may run again after a failure.
ALTER TABLE payments
    ADD COLUMN IF NOT EXISTS capture_method text NOT NULL DEFAULT 'automatic',
    -- what was captured, once captured; NULL for an automatic payment,
    -- which captures its whole amount when it succeeds
    ADD COLUMN IF NOT EXISTS captured_minor bigint,
    ADD COLUMN IF NOT EXISTS authorization_expires_at timestamptz;

ALTER TABLE payments DROP CONSTRAINT IF EXISTS payments_capture_method_check;
ALTER TABLE payments ADD CONSTRAINT payments_capture_method_check
    CHECK (capture_method IN ('automatic', 'manual')) NOT VALID;
ALTER TABLE payments VALIDATE CONSTRAINT payments_capture_method_check;
ALTER TABLE payments DROP CONSTRAINT IF EXISTS payments_captured_minor_check;
ALTER TABLE payments ADD CONSTRAINT payments_captured_minor_check
    CHECK (captured_minor IS NULL OR (captured_minor > 0 AND captured_minor <= amount_minor)) NOT VALID;
ALTER TABLE payments VALIDATE CONSTRAINT payments_captured_minor_check;

-- The wider list of states: checked NOT VALID, then validated without
-- blocking writes, before the narrower one goes.
ALTER TABLE payments DROP CONSTRAINT IF EXISTS payments_state_check_v18;
ALTER TABLE payments ADD CONSTRAINT payments_state_check_v18 CHECK (state IN (
    'RECEIVED', 'PROVIDER_REQUEST_SENT', 'COMPLETED', 'DECLINED',
    'FAILED_RETRYABLE', 'UNKNOWN_REQUIRES_RECOVERY', 'CANCELED',
    'AUTHORIZED', 'CAPTURE_REQUESTED', 'VOID_REQUESTED', 'CANCEL_REQUESTED')) NOT VALID;
ALTER TABLE payments VALIDATE CONSTRAINT payments_state_check_v18;
ALTER TABLE payments DROP CONSTRAINT IF EXISTS payments_state_check;

INSERT INTO state_machine_moves (machine, from_state, to_state) VALUES
    ('payment', 'PROVIDER_REQUEST_SENT', 'AUTHORIZED'),
    ('payment', 'UNKNOWN_REQUIRES_RECOVERY', 'AUTHORIZED'),
    ('payment', 'AUTHORIZED', 'CAPTURE_REQUESTED'),
    ('payment', 'AUTHORIZED', 'VOID_REQUESTED'),
    ('payment', 'CAPTURE_REQUESTED', 'COMPLETED'),
    ('payment', 'CAPTURE_REQUESTED', 'AUTHORIZED'),
    ('payment', 'CAPTURE_REQUESTED', 'CANCELED'),
    ('payment', 'VOID_REQUESTED', 'CANCELED'),
    ('payment', 'VOID_REQUESTED', 'AUTHORIZED'),
    -- a void that finds the charge captured (elsewhere, or by a request of
    -- ours processed after all): the money moved
    ('payment', 'VOID_REQUESTED', 'COMPLETED'),
    -- cancel_payment of a payment that moved no money: its key's next owner
    -- ends it as abandoned, or settles what the provider holds after all
    ('payment', 'RECEIVED', 'CANCEL_REQUESTED'),
    ('payment', 'FAILED_RETRYABLE', 'CANCEL_REQUESTED'),
    ('payment', 'CANCEL_REQUESTED', 'CANCELED'),
    ('payment', 'CANCEL_REQUESTED', 'PROVIDER_REQUEST_SENT')
ON CONFLICT DO NOTHING;

-- The actions on an authorized payment: its captures and its voids
-- (cancellations). Each is the resource of one idempotency key of
-- capture_payment or cancel_payment, and goes through the provider with a
-- key derived from its own id, with its own state machine ('payment_action').
CREATE TABLE IF NOT EXISTS payment_actions (
    id                 text        PRIMARY KEY,
    tenant_id          text        NOT NULL,
    payment_id         text        NOT NULL REFERENCES payments (id),
    kind               text        NOT NULL CHECK (kind IN ('capture', 'void')),
    amount_minor       bigint      NOT NULL CHECK (amount_minor >= 0),
    currency           text        NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    reason             text        NOT NULL DEFAULT '',
    state              text        NOT NULL CHECK (state IN (
                           'RECEIVED', 'PROVIDER_REQUEST_SENT', 'SUCCEEDED', 'DECLINED',
                           'FAILED_RETRYABLE', 'UNKNOWN_REQUIRES_RECOVERY', 'CANCELED')),
    provider_reference text,
    decline_code       text,
    first_sent_at      timestamptz,
    last_sent_at       timestamptz,
    created_at         timestamptz NOT NULL,
    updated_at         timestamptz NOT NULL
);
-- A payment's actions, oldest first.
CREATE INDEX IF NOT EXISTS payment_actions_payment_idx ON payment_actions (payment_id, created_at, id);
-- At most one capture of a payment ever succeeds, and the database says so
-- too (the payment's move out of AUTHORIZED already lets one action win).
CREATE UNIQUE INDEX IF NOT EXISTS payment_actions_one_capture_key
    ON payment_actions (payment_id) WHERE kind = 'capture' AND state = 'SUCCEEDED';

CREATE TABLE IF NOT EXISTS payment_action_transitions (
    id                bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    payment_action_id text        NOT NULL REFERENCES payment_actions (id),
    from_state        text,
    to_state          text        NOT NULL,
    reason            text        NOT NULL,
    occurred_at       timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS payment_action_transitions_action_idx
    ON payment_action_transitions (payment_action_id, id);

INSERT INTO state_machine_moves (machine, from_state, to_state) VALUES
    ('payment_action', '', 'RECEIVED'),
    ('payment_action', 'RECEIVED', 'PROVIDER_REQUEST_SENT'),
    ('payment_action', 'RECEIVED', 'CANCELED'),
    -- a cancel of a payment that moved no money ends without a call
    ('payment_action', 'RECEIVED', 'SUCCEEDED'),
    ('payment_action', 'RECEIVED', 'DECLINED'),
    ('payment_action', 'PROVIDER_REQUEST_SENT', 'SUCCEEDED'),
    ('payment_action', 'PROVIDER_REQUEST_SENT', 'DECLINED'),
    ('payment_action', 'PROVIDER_REQUEST_SENT', 'FAILED_RETRYABLE'),
    ('payment_action', 'PROVIDER_REQUEST_SENT', 'UNKNOWN_REQUIRES_RECOVERY'),
    ('payment_action', 'UNKNOWN_REQUIRES_RECOVERY', 'SUCCEEDED'),
    ('payment_action', 'UNKNOWN_REQUIRES_RECOVERY', 'DECLINED'),
    ('payment_action', 'UNKNOWN_REQUIRES_RECOVERY', 'PROVIDER_REQUEST_SENT'),
    ('payment_action', 'FAILED_RETRYABLE', 'PROVIDER_REQUEST_SENT'),
    ('payment_action', 'FAILED_RETRYABLE', 'CANCELED')
ON CONFLICT DO NOTHING;

CREATE OR REPLACE TRIGGER payment_actions_state_machine_insert BEFORE INSERT ON payment_actions
    FOR EACH ROW EXECUTE FUNCTION enforce_state_machine('payment_action');
CREATE OR REPLACE TRIGGER payment_actions_state_machine_update BEFORE UPDATE OF state ON payment_actions
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state)
    EXECUTE FUNCTION enforce_state_machine('payment_action');

-- +goose Down
-- (A database holding manual payments cannot go down: the narrower CHECK
-- refuses their states.)
DROP TABLE IF EXISTS payment_action_transitions;
DROP TABLE IF EXISTS payment_actions;
DELETE FROM idempotency_keys WHERE resource_type IN ('capture', 'cancellation');
DELETE FROM state_machine_moves WHERE machine = 'payment_action';
DELETE FROM state_machine_moves WHERE machine = 'payment'
    AND (from_state IN ('AUTHORIZED', 'CAPTURE_REQUESTED', 'VOID_REQUESTED', 'CANCEL_REQUESTED')
         OR to_state IN ('AUTHORIZED', 'CANCEL_REQUESTED'));
ALTER TABLE payments ADD CONSTRAINT payments_state_check CHECK (state IN (
    'RECEIVED', 'PROVIDER_REQUEST_SENT', 'COMPLETED', 'DECLINED',
    'FAILED_RETRYABLE', 'UNKNOWN_REQUIRES_RECOVERY', 'CANCELED'));
ALTER TABLE payments DROP CONSTRAINT IF EXISTS payments_state_check_v18;
ALTER TABLE payments
    DROP CONSTRAINT IF EXISTS payments_captured_minor_check,
    DROP CONSTRAINT IF EXISTS payments_capture_method_check,
    DROP COLUMN IF EXISTS authorization_expires_at,
    DROP COLUMN IF EXISTS captured_minor,
    DROP COLUMN IF EXISTS capture_method;
