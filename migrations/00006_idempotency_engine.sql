-- +goose Up

-- The idempotency engine (internal/idempotency) serves any operation, not
-- only payments.
--
-- 1. Each key row has its own id. Fencing, lease renewal, the final answer,
--    release, takeover, recovery and clean-up address the row by id and
--    fencing token, never by a domain id.
-- 2. A row points at the resource its first request created by
--    (resource_type, resource_id), with no foreign key to any domain table.
-- 3. The reconciler's bookkeeping moves from payments to the key row, so one
--    recovery loop serves every operation: recovery_next_at is set (in the
--    transaction of the state change) while the resource is in a state whose
--    outcome must be found out if its owner dies, and NULL otherwise.
--
-- Existing rows keep their keys, fingerprints, answers, leases and tokens.

-- The old foreign key from keys to payments is deferred: check it now, so
-- that the table can be altered in this transaction.
SET CONSTRAINTS ALL IMMEDIATE;

ALTER TABLE idempotency_keys
    ADD COLUMN id                  bigint GENERATED ALWAYS AS IDENTITY,
    ADD COLUMN resource_type       text,
    ADD COLUMN resource_id         text,
    ADD COLUMN recovery_next_at    timestamptz,
    ADD COLUMN recovery_attempts   integer NOT NULL DEFAULT 0,
    ADD COLUMN recovery_last_error text,
    ADD COLUMN manual_review_at    timestamptz;

UPDATE idempotency_keys k
SET resource_type       = 'payment',
    resource_id         = k.payment_id,
    recovery_attempts   = p.recovery_attempts,
    recovery_last_error = p.recovery_last_error,
    manual_review_at    = p.manual_review_at,
    recovery_next_at    = CASE WHEN p.state IN ('PROVIDER_REQUEST_SENT', 'UNKNOWN_REQUIRES_RECOVERY')
                               THEN p.recovery_next_at END
FROM payments p
WHERE p.id = k.payment_id;

ALTER TABLE idempotency_keys
    ALTER COLUMN resource_type SET NOT NULL,
    ALTER COLUMN resource_id SET NOT NULL,
    DROP CONSTRAINT idempotency_keys_pkey,
    ADD CONSTRAINT idempotency_keys_pkey PRIMARY KEY (id),
    ADD CONSTRAINT idempotency_keys_scope_key UNIQUE (tenant_id, operation, idempotency_key),
    -- One key created each resource: how a webhook or an operator finds the
    -- key of a payment.
    ADD CONSTRAINT idempotency_keys_resource_key UNIQUE (resource_type, resource_id),
    DROP COLUMN payment_id;

-- What the reconciler claims: keys whose resource may have moved money.
CREATE INDEX idempotency_keys_recovery_due_idx ON idempotency_keys (recovery_next_at)
    WHERE recovery_next_at IS NOT NULL AND manual_review_at IS NULL;
-- Keys a person must look at.
CREATE INDEX idempotency_keys_manual_review_idx ON idempotency_keys (manual_review_at)
    WHERE manual_review_at IS NOT NULL;

DROP INDEX payments_recovery_due_idx;
DROP INDEX payments_manual_review_idx;
ALTER TABLE payments
    -- What later operations (refunds) returned of the payment: shown as
    -- refundedAmount; never more than the payment.
    ADD COLUMN refunded_minor bigint NOT NULL DEFAULT 0
        CONSTRAINT payments_refunded_minor_check CHECK (refunded_minor >= 0 AND refunded_minor <= amount_minor),
    DROP COLUMN recovery_attempts,
    DROP COLUMN recovery_next_at,
    DROP COLUMN recovery_last_error,
    DROP COLUMN manual_review_at;

-- State machines the database owns. Each machine's allowed moves are rows
-- here (from_state '' is the state a row is created in); a trigger on each
-- resource table refuses any other move, whatever SQL tries it. The Go
-- tables (internal/payments/state.go, ...) must say the same: a test
-- compares them.
CREATE TABLE state_machine_moves (
    machine    text NOT NULL,
    from_state text NOT NULL,
    to_state   text NOT NULL,
    PRIMARY KEY (machine, from_state, to_state)
);

INSERT INTO state_machine_moves (machine, from_state, to_state) VALUES
    ('payment', '', 'RECEIVED'),
    ('payment', 'RECEIVED', 'PROVIDER_REQUEST_SENT'),
    ('payment', 'PROVIDER_REQUEST_SENT', 'COMPLETED'),
    ('payment', 'PROVIDER_REQUEST_SENT', 'DECLINED'),
    ('payment', 'PROVIDER_REQUEST_SENT', 'FAILED_RETRYABLE'),
    ('payment', 'PROVIDER_REQUEST_SENT', 'UNKNOWN_REQUIRES_RECOVERY'),
    ('payment', 'UNKNOWN_REQUIRES_RECOVERY', 'COMPLETED'),
    ('payment', 'UNKNOWN_REQUIRES_RECOVERY', 'DECLINED'),
    ('payment', 'UNKNOWN_REQUIRES_RECOVERY', 'PROVIDER_REQUEST_SENT'),
    ('payment', 'FAILED_RETRYABLE', 'PROVIDER_REQUEST_SENT');

-- +goose StatementBegin
-- enforce_state_machine refuses a row created in, or moved to, a state its
-- machine (the trigger's argument) does not allow from where it was.
CREATE FUNCTION enforce_state_machine() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    prior text := '';
BEGIN
    IF TG_OP = 'UPDATE' THEN
        prior := OLD.state;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM state_machine_moves m
                   WHERE m.machine = TG_ARGV[0] AND m.from_state = prior AND m.to_state = NEW.state) THEN
        RAISE EXCEPTION 'illegal % move % -> %', TG_ARGV[0], COALESCE(NULLIF(prior, ''), '(new)'), NEW.state
            USING ERRCODE = 'check_violation', CONSTRAINT = 'state_machine_moves';
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER payments_state_machine_insert BEFORE INSERT ON payments
    FOR EACH ROW EXECUTE FUNCTION enforce_state_machine('payment');
CREATE TRIGGER payments_state_machine_update BEFORE UPDATE OF state ON payments
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state)
    EXECUTE FUNCTION enforce_state_machine('payment');

-- Outbox events name their aggregate's type; nothing in the outbox assumes
-- "payment" any more (the column existed; its values stay).

-- +goose Down
DROP TRIGGER payments_state_machine_update ON payments;
DROP TRIGGER payments_state_machine_insert ON payments;
DROP FUNCTION enforce_state_machine();
DROP TABLE state_machine_moves;

ALTER TABLE payments
    DROP COLUMN refunded_minor,
    ADD COLUMN recovery_attempts   integer     NOT NULL DEFAULT 0,
    ADD COLUMN recovery_next_at    timestamptz NOT NULL DEFAULT '-infinity',
    ADD COLUMN recovery_last_error text,
    ADD COLUMN manual_review_at    timestamptz;
UPDATE payments p
SET recovery_attempts = k.recovery_attempts,
    recovery_next_at = COALESCE(k.recovery_next_at, '-infinity'),
    recovery_last_error = k.recovery_last_error,
    manual_review_at = k.manual_review_at
FROM idempotency_keys k
WHERE k.resource_type = 'payment' AND k.resource_id = p.id;
CREATE INDEX payments_recovery_due_idx ON payments (recovery_next_at)
    WHERE state IN ('PROVIDER_REQUEST_SENT', 'UNKNOWN_REQUIRES_RECOVERY') AND manual_review_at IS NULL;
CREATE INDEX payments_manual_review_idx ON payments (manual_review_at)
    WHERE manual_review_at IS NOT NULL;

DROP INDEX idempotency_keys_manual_review_idx;
DROP INDEX idempotency_keys_recovery_due_idx;
DELETE FROM idempotency_keys WHERE resource_type <> 'payment';
ALTER TABLE idempotency_keys
    ADD COLUMN payment_id text REFERENCES payments (id) DEFERRABLE INITIALLY DEFERRED;
UPDATE idempotency_keys SET payment_id = resource_id;
ALTER TABLE idempotency_keys
    ALTER COLUMN payment_id SET NOT NULL,
    ADD CONSTRAINT idempotency_keys_payment_id_key UNIQUE (payment_id),
    DROP CONSTRAINT idempotency_keys_resource_key,
    DROP CONSTRAINT idempotency_keys_scope_key,
    DROP CONSTRAINT idempotency_keys_pkey,
    ADD CONSTRAINT idempotency_keys_pkey PRIMARY KEY (tenant_id, operation, idempotency_key),
    DROP COLUMN manual_review_at,
    DROP COLUMN recovery_last_error,
    DROP COLUMN recovery_attempts,
    DROP COLUMN recovery_next_at,
    DROP COLUMN resource_id,
    DROP COLUMN resource_type,
    DROP COLUMN id;
