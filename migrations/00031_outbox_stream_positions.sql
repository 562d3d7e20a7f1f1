-- +goose Up

-- How far the outbox's stream reader (internal/outbox/stream) got, by
-- commit time, per replication slot: every transaction that committed
-- before committed_at was published. A slot lives on one server; after a
-- failover to a standby, which has no slot, the reader creates it again and
-- publishes once more what was written since a little before committed_at
-- (at least once: consumers deduplicate by event id). One row per slot,
-- written about once a second, never per event. committed_at is null until
-- the first catch-up ends. catching_up is set before the reader creates the
-- slot and cleared once its catch-up is published: a reader that finds the
-- slot with it still set (its creator died catching up) drops the slot and
-- starts over, so that the catch-up is never skipped.
CREATE TABLE outbox_stream_positions (
    slot         text        PRIMARY KEY,
    committed_at timestamptz,
    updated_at   timestamptz NOT NULL,
    catching_up  boolean     NOT NULL DEFAULT false
);

-- +goose Down
DROP TABLE IF EXISTS outbox_stream_positions;
