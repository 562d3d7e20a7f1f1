-- +goose Up

-- Refunds: the second idempotent operation (internal/refunds). A refund
-- returns part or all of a succeeded payment. Its state machine is its own
-- table of moves, enforced like the payment's (00006).
CREATE TABLE refunds (
    id                 text        PRIMARY KEY,
    tenant_id          text        NOT NULL,
    payment_id         text        NOT NULL REFERENCES payments (id),
    amount_minor       bigint      NOT NULL CHECK (amount_minor > 0),
    currency           text        NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    reason             text        NOT NULL DEFAULT '',
    state              text        NOT NULL CHECK (state IN (
                           'RECEIVED', 'PROVIDER_REQUEST_SENT', 'SUCCEEDED', 'DECLINED',
                           'FAILED_RETRYABLE', 'UNKNOWN_REQUIRES_RECOVERY')),
    provider_reference text,
    decline_code       text,
    created_at         timestamptz NOT NULL,
    updated_at         timestamptz NOT NULL
);
-- A payment's refunds, oldest first; also what the refundable sum reads.
CREATE INDEX refunds_payment_idx ON refunds (payment_id, created_at, id);

CREATE TABLE refund_transitions (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    refund_id   text        NOT NULL REFERENCES refunds (id),
    from_state  text,
    to_state    text        NOT NULL,
    reason      text        NOT NULL,
    occurred_at timestamptz NOT NULL
);
CREATE INDEX refund_transitions_refund_idx ON refund_transitions (refund_id, id);

INSERT INTO state_machine_moves (machine, from_state, to_state) VALUES
    ('refund', '', 'RECEIVED'),
    ('refund', 'RECEIVED', 'PROVIDER_REQUEST_SENT'),
    ('refund', 'PROVIDER_REQUEST_SENT', 'SUCCEEDED'),
    ('refund', 'PROVIDER_REQUEST_SENT', 'DECLINED'),
    ('refund', 'PROVIDER_REQUEST_SENT', 'FAILED_RETRYABLE'),
    ('refund', 'PROVIDER_REQUEST_SENT', 'UNKNOWN_REQUIRES_RECOVERY'),
    ('refund', 'UNKNOWN_REQUIRES_RECOVERY', 'SUCCEEDED'),
    ('refund', 'UNKNOWN_REQUIRES_RECOVERY', 'DECLINED'),
    ('refund', 'UNKNOWN_REQUIRES_RECOVERY', 'PROVIDER_REQUEST_SENT'),
    ('refund', 'FAILED_RETRYABLE', 'PROVIDER_REQUEST_SENT');

CREATE TRIGGER refunds_state_machine_insert BEFORE INSERT ON refunds
    FOR EACH ROW EXECUTE FUNCTION enforce_state_machine('refund');
CREATE TRIGGER refunds_state_machine_update BEFORE UPDATE OF state ON refunds
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state)
    EXECUTE FUNCTION enforce_state_machine('refund');

-- The ledger books one entry per succeeded refund: its natural key gains
-- the refund ('' for a payment's own entry).
ALTER TABLE ledger_entries
    ADD COLUMN refund_id text NOT NULL DEFAULT '',
    DROP CONSTRAINT ledger_entries_entry_type_check,
    ADD CONSTRAINT ledger_entries_entry_type_check CHECK (entry_type IN ('PAYMENT_SUCCEEDED', 'REFUND_SUCCEEDED')),
    DROP CONSTRAINT ledger_entries_payment_entry_key,
    ADD CONSTRAINT ledger_entries_payment_entry_key UNIQUE (payment_id, entry_type, refund_id);

-- +goose Down
DELETE FROM ledger_entries WHERE entry_type = 'REFUND_SUCCEEDED';
ALTER TABLE ledger_entries
    DROP CONSTRAINT ledger_entries_payment_entry_key,
    ADD CONSTRAINT ledger_entries_payment_entry_key UNIQUE (payment_id, entry_type),
    DROP CONSTRAINT ledger_entries_entry_type_check,
    ADD CONSTRAINT ledger_entries_entry_type_check CHECK (entry_type IN ('PAYMENT_SUCCEEDED')),
    DROP COLUMN refund_id;
DELETE FROM idempotency_keys WHERE resource_type = 'refund';
DELETE FROM state_machine_moves WHERE machine = 'refund';
DROP TABLE refund_transitions;
DROP TABLE refunds;
