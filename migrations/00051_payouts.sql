-- +goose Up

-- Payouts: the example operation (examples/payouts). A payout sends part of
-- a merchant account's balance to a bank account, through a provider port
-- of its own. Its table, its audit table and its state machine's moves
-- follow refunds (00007): the trigger enforce_state_machine refuses every
-- move that state_machine_moves does not list for the machine 'payout'.
-- A payout is created already sent (providerflow.Flow.SendOnClaim), so
-- the machine lets a row be inserted in PROVIDER_REQUEST_SENT.
--
-- Expand only: new tables, which the previous release never reads, and
-- one more ledger entry type.
CREATE TABLE payouts (
    id                 text        PRIMARY KEY,
    tenant_id          text        NOT NULL,
    account_id         text        NOT NULL,
    amount_minor       bigint      NOT NULL CHECK (amount_minor > 0),
    currency           text        NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    destination        text        NOT NULL,
    state              text        NOT NULL CHECK (state IN (
                           'RECEIVED', 'PROVIDER_REQUEST_SENT', 'SUCCEEDED', 'DECLINED',
                           'FAILED_RETRYABLE', 'UNKNOWN_REQUIRES_RECOVERY')),
    provider_reference text,
    decline_code       text,
    first_sent_at      timestamptz,
    last_sent_at       timestamptz,
    created_at         timestamptz NOT NULL,
    updated_at         timestamptz NOT NULL
);

CREATE TABLE payout_transitions (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    payout_id   text        NOT NULL REFERENCES payouts (id),
    from_state  text,
    to_state    text        NOT NULL,
    reason      text        NOT NULL,
    occurred_at timestamptz NOT NULL,
    actor       text,
    request_id  text
);
CREATE INDEX payout_transitions_payout_idx ON payout_transitions (payout_id, id);

INSERT INTO state_machine_moves (machine, from_state, to_state) VALUES
    ('payout', '', 'RECEIVED'),
    ('payout', '', 'PROVIDER_REQUEST_SENT'),
    ('payout', 'RECEIVED', 'PROVIDER_REQUEST_SENT'),
    ('payout', 'PROVIDER_REQUEST_SENT', 'SUCCEEDED'),
    ('payout', 'PROVIDER_REQUEST_SENT', 'DECLINED'),
    ('payout', 'PROVIDER_REQUEST_SENT', 'FAILED_RETRYABLE'),
    ('payout', 'PROVIDER_REQUEST_SENT', 'UNKNOWN_REQUIRES_RECOVERY'),
    ('payout', 'UNKNOWN_REQUIRES_RECOVERY', 'SUCCEEDED'),
    ('payout', 'UNKNOWN_REQUIRES_RECOVERY', 'DECLINED'),
    ('payout', 'UNKNOWN_REQUIRES_RECOVERY', 'PROVIDER_REQUEST_SENT'),
    ('payout', 'FAILED_RETRYABLE', 'PROVIDER_REQUEST_SENT');

CREATE TRIGGER payouts_state_machine_insert BEFORE INSERT ON payouts
    FOR EACH ROW EXECUTE FUNCTION enforce_state_machine('payout');
CREATE TRIGGER payouts_state_machine_update BEFORE UPDATE OF state ON payouts
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state)
    EXECUTE FUNCTION enforce_state_machine('payout');

-- The ledger books a payout that succeeded (PAYOUT_SUCCEEDED).
ALTER TABLE ledger_entries
    DROP CONSTRAINT ledger_entries_entry_type_check,
    ADD CONSTRAINT ledger_entries_entry_type_check
        CHECK (entry_type IN ('PAYMENT_SUCCEEDED', 'REFUND_SUCCEEDED', 'PAYOUT_SUCCEEDED'));

-- +goose Down
DELETE FROM ledger_entries WHERE entry_type = 'PAYOUT_SUCCEEDED';
ALTER TABLE ledger_entries
    DROP CONSTRAINT ledger_entries_entry_type_check,
    ADD CONSTRAINT ledger_entries_entry_type_check
        CHECK (entry_type IN ('PAYMENT_SUCCEEDED', 'REFUND_SUCCEEDED'));
DELETE FROM idempotency_keys WHERE resource_type = 'payout';
DELETE FROM state_machine_moves WHERE machine = 'payout';
DROP TABLE payout_transitions;
DROP TABLE payouts;
