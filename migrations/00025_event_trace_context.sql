-- +goose Up

-- The trace context an event was created under (issue 21, "Tracing"): the
-- W3C traceparent of the request (or the reconciler's pass) that wrote the
-- event, so that its publish and its webhook deliveries continue that
-- trace. NULL when tracing was off, and for every event of a release that
-- did not write it.
--
-- Expand only: nullable columns without a default (no table rewrite), which
-- the previous release neither reads nor writes.
ALTER TABLE outbox_events ADD COLUMN IF NOT EXISTS traceparent text;
ALTER TABLE events ADD COLUMN IF NOT EXISTS traceparent text;

-- +goose Down
ALTER TABLE events DROP COLUMN IF EXISTS traceparent;
ALTER TABLE outbox_events DROP COLUMN IF EXISTS traceparent;
