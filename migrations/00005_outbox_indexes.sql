-- +goose NO TRANSACTION
-- +goose Up

-- Outbox indexes for a large table (internal/outbox, internal/cleanup).
--
-- Built CONCURRENTLY, so that payments (which insert into outbox_events)
-- are not blocked while a big table is indexed; hence no transaction. Each
-- statement may be run again: goose records the migration only after the
-- last one, and a CONCURRENTLY build that failed leaves an invalid index,
-- which the DROP before each CREATE removes.
--
-- No schema change, but a change of meaning since this version of the
-- relay: outbox_events.attempts counts the publishes a relay started, not
-- its claims (00003), and a publish cut short by a broker outage or a
-- shutdown is not counted.

-- What the relay claims: due rows in the order they are due, then in
-- insertion order. The claim's scan stops at the first row not due yet.
DROP INDEX CONCURRENTLY IF EXISTS outbox_events_due_idx;
CREATE INDEX CONCURRENTLY outbox_events_due_idx ON outbox_events (next_attempt_at, seq)
    WHERE published_at IS NULL AND parked_at IS NULL;

-- Clean-up deletes published rows by publication time.
DROP INDEX CONCURRENTLY IF EXISTS outbox_events_published_idx;
CREATE INDEX CONCURRENTLY outbox_events_published_idx ON outbox_events (published_at)
    WHERE published_at IS NOT NULL;

-- Parked rows (few): the parked gauge, `paymentsapi outbox parked` and
-- `paymentsapi outbox unpark -all`.
DROP INDEX CONCURRENTLY IF EXISTS outbox_events_parked_idx;
CREATE INDEX CONCURRENTLY outbox_events_parked_idx ON outbox_events (parked_at, seq)
    WHERE parked_at IS NOT NULL AND published_at IS NULL;

-- Unused since the relay claims by seq (00003) and then by due time (above):
-- no query filters or orders by (next_attempt_at, created_at) or by
-- aggregate_id alone. The per-payment order check uses
-- outbox_events_unpublished_aggregate_idx; the backlog age reads
-- outbox_events_claimable_idx (seq).
DROP INDEX CONCURRENTLY IF EXISTS outbox_events_pending_idx;
DROP INDEX CONCURRENTLY IF EXISTS outbox_events_aggregate_idx;

-- +goose Down
CREATE INDEX CONCURRENTLY IF NOT EXISTS outbox_events_aggregate_idx ON outbox_events (aggregate_id, created_at);
CREATE INDEX CONCURRENTLY IF NOT EXISTS outbox_events_pending_idx ON outbox_events (next_attempt_at, created_at)
    WHERE published_at IS NULL AND parked_at IS NULL;
DROP INDEX CONCURRENTLY IF EXISTS outbox_events_parked_idx;
DROP INDEX CONCURRENTLY IF EXISTS outbox_events_published_idx;
DROP INDEX CONCURRENTLY IF EXISTS outbox_events_due_idx;
