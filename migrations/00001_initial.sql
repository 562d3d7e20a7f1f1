-- +goose Up

-- API keys: one secret per tenant, stored as a SHA-256 hash only.
CREATE TABLE api_keys (
    tenant_id   text        PRIMARY KEY,
    secret_hash bytea       NOT NULL UNIQUE,
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL
);

-- Payments and their state machine. The allowed transitions are declared in
-- internal/payments/state.go; every write is a guarded UPDATE ... WHERE state = $from.
CREATE TABLE payments (
    id                 text        PRIMARY KEY,
    tenant_id          text        NOT NULL,
    account_id         text        NOT NULL,
    amount_minor       bigint      NOT NULL CHECK (amount_minor > 0),
    currency           text        NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    merchant_reference text        NOT NULL,
    payment_method     text        NOT NULL,
    channel            text        NOT NULL,
    description        text        NOT NULL DEFAULT '',
    state              text        NOT NULL CHECK (state IN (
                           'RECEIVED', 'PROVIDER_REQUEST_SENT', 'COMPLETED', 'DECLINED',
                           'FAILED_RETRYABLE', 'UNKNOWN_REQUIRES_RECOVERY')),
    provider_reference text,
    decline_code       text,
    created_at         timestamptz NOT NULL,
    updated_at         timestamptz NOT NULL
);

-- One live payment per (tenant, account, merchant reference): a declined
-- payment frees its reference so that the customer can try again.
CREATE UNIQUE INDEX payments_merchant_reference_key
    ON payments (tenant_id, account_id, merchant_reference)
    WHERE state <> 'DECLINED';

-- Newest-first listing, keyset-paginated, optionally per account.
CREATE INDEX payments_tenant_created_idx ON payments (tenant_id, created_at DESC, id DESC);
CREATE INDEX payments_tenant_account_created_idx ON payments (tenant_id, account_id, created_at DESC, id DESC);

-- Every state change, for audit and debugging.
CREATE TABLE payment_transitions (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    payment_id  text        NOT NULL REFERENCES payments (id),
    from_state  text,
    to_state    text        NOT NULL,
    reason      text        NOT NULL,
    occurred_at timestamptz NOT NULL
);
CREATE INDEX payment_transitions_payment_idx ON payment_transitions (payment_id, id);

-- Idempotency keys, scoped to (tenant, operation, key). The row inserted
-- first is the lock: its owner holds a lease (lease_expires_at) and a fencing
-- token; every write the owner makes is conditioned on that token.
CREATE TABLE idempotency_keys (
    tenant_id         text        NOT NULL,
    operation         text        NOT NULL,
    idempotency_key   text        NOT NULL,
    fingerprint       bytea       NOT NULL,
    payment_id        text        NOT NULL UNIQUE
                      REFERENCES payments (id) DEFERRABLE INITIALLY DEFERRED,
    fencing_token     bigint      NOT NULL DEFAULT 1,
    lease_expires_at  timestamptz,          -- NULL: nobody owns the key now
    response_status   integer,              -- NULL until a final answer is stored
    response_headers  jsonb,
    response_body     bytea,
    created_at        timestamptz NOT NULL,
    completed_at      timestamptz,
    PRIMARY KEY (tenant_id, operation, idempotency_key)
);

-- Transactional outbox: written in the same transaction as the state change.
CREATE TABLE outbox_events (
    id             uuid        PRIMARY KEY,
    aggregate_type text        NOT NULL,
    aggregate_id   text        NOT NULL,
    event_type     text        NOT NULL,
    payload        jsonb       NOT NULL,
    created_at     timestamptz NOT NULL,
    published_at   timestamptz,
    attempts       integer     NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL,
    last_error     text,
    parked_at      timestamptz
);
CREATE INDEX outbox_events_pending_idx ON outbox_events (next_attempt_at, created_at)
    WHERE published_at IS NULL AND parked_at IS NULL;
CREATE INDEX outbox_events_aggregate_idx ON outbox_events (aggregate_id, created_at);

-- +goose Down
DROP TABLE outbox_events;
DROP TABLE idempotency_keys;
DROP TABLE payment_transitions;
DROP TABLE payments;
DROP TABLE api_keys;
