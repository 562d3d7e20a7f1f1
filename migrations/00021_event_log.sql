-- +goose Up

-- The event log (issue 19): every event of a tenant's payments and refunds,
-- as merchants see it (GET /events), kept EVENT_RETENTION. The outbox relay
-- records each event here before it publishes it (internal/eventlog), so
-- the log and the broker see the same events, at least once, and the
-- primary key (the outbox event's id) makes a second recording a no-op.
-- Webhook deliveries to merchants will be made from it.
--
-- Expand only: a new table the previous release never touches.
CREATE TABLE IF NOT EXISTS events (
    id           uuid        PRIMARY KEY, -- the outbox event's id
    tenant_id    text        NOT NULL,
    type         text        NOT NULL,    -- its name for merchants: payment.succeeded
    aggregate_id text        NOT NULL,
    occurred_at  timestamptz NOT NULL,    -- when the event happened
    data         jsonb       NOT NULL,    -- the resource's body as of the event
    recorded_at  timestamptz NOT NULL     -- when the relay recorded it (retention runs from it)
);
-- A tenant's events, read newest first (the listing and its cursor) by a
-- backward scan: ascending, so that new entries fill the right edge.
CREATE INDEX IF NOT EXISTS events_tenant_idx ON events (tenant_id, occurred_at, id);
-- Clean-up's oldest first.
CREATE INDEX IF NOT EXISTS events_recorded_idx ON events (recorded_at);

-- +goose Down
DROP TABLE IF EXISTS events;
