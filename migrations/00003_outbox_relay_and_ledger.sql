-- +goose Up

-- Outbox relay bookkeeping (internal/outbox/relay.go).
--
-- seq is the order rows were inserted in. The events of one payment are
-- written by successive transactions (each commits before the next one
-- starts), so within a payment seq is the order the events happened in. The
-- relay publishes a payment's events in seq order: event ids (UUIDv7) only
-- order to the millisecond, and two events may carry the same created_at.
--
-- A relay claims rows in a short transaction by setting claimed_until (a
-- lease) and claim_token, publishes outside any transaction, then marks
-- them published. A row whose claim ran out (the relay died) is claimed
-- again. attempts counts claims; parked_at marks a row the relay gave up
-- on: kept, visible, counted, never deleted.
ALTER TABLE outbox_events
    ADD COLUMN seq           bigint GENERATED ALWAYS AS IDENTITY,
    ADD COLUMN claimed_until timestamptz,
    ADD COLUMN claim_token   uuid;

CREATE UNIQUE INDEX outbox_events_seq_key ON outbox_events (seq);

-- What the relay claims, oldest first.
CREATE INDEX outbox_events_claimable_idx ON outbox_events (seq)
    WHERE published_at IS NULL AND parked_at IS NULL;

-- The per-payment ordering check ("no earlier unpublished event of this
-- aggregate", parked ones included) and the metrics' counts.
CREATE INDEX outbox_events_unpublished_aggregate_idx ON outbox_events (aggregate_type, aggregate_id, seq)
    WHERE published_at IS NULL;

-- Inbox of the event consumers (internal/ledger): one row per event a
-- consumer has handled, written in the transaction of the consumer's side
-- effect, so that a redelivered event is recognised and skipped.
CREATE TABLE inbox (
    consumer     text        NOT NULL,
    event_id     uuid        NOT NULL,
    event_type   text        NOT NULL,
    aggregate_id text        NOT NULL,
    -- applied, duplicate_entry (the side effect already existed under its
    -- natural key), ignored (not an event this consumer acts on), rejected
    -- (unusable payload; error says why, for a person to look at).
    outcome      text        NOT NULL CHECK (outcome IN ('applied', 'duplicate_entry', 'ignored', 'rejected')),
    error        text,
    received_at  timestamptz NOT NULL,
    PRIMARY KEY (consumer, event_id)
);

-- The ledger projector's entries: exactly one per (payment, entry type),
-- whatever the number of events or deliveries. No foreign key to payments:
-- the ledger is fed by events only, and may live in another database.
CREATE TABLE ledger_entries (
    id                 bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    payment_id         text        NOT NULL,
    entry_type         text        NOT NULL CHECK (entry_type IN ('PAYMENT_SUCCEEDED')),
    tenant_id          text,                 -- from the event payload's tenantId, when it carries one
    account_id         text        NOT NULL,
    amount_minor       bigint      NOT NULL CHECK (amount_minor > 0),
    currency           text        NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    provider_reference text,
    event_id           uuid        NOT NULL, -- the event that caused the entry
    occurred_at        timestamptz NOT NULL, -- when the payment succeeded (the event's time)
    created_at         timestamptz NOT NULL, -- when the entry was booked
    CONSTRAINT ledger_entries_payment_entry_key UNIQUE (payment_id, entry_type)
);
CREATE INDEX ledger_entries_account_idx ON ledger_entries (account_id, created_at);

-- +goose Down
DROP TABLE ledger_entries;
DROP TABLE inbox;
DROP INDEX outbox_events_unpublished_aggregate_idx;
DROP INDEX outbox_events_claimable_idx;
DROP INDEX outbox_events_seq_key;
ALTER TABLE outbox_events
    DROP COLUMN claim_token,
    DROP COLUMN claimed_until,
    DROP COLUMN seq;
