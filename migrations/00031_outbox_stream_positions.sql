-- +goose Up

-- How far the outbox's stream reader (internal/outbox/stream) got, by
-- commit time, per replication slot: every transaction that committed
-- before committed_at was published. A slot lives on one server; after a
-- failover to a standby, which has no slot, the reader creates it again and
-- publishes once more what was written since a little before committed_at
-- (at least once: consumers deduplicate by event id). One row per slot,
-- written about once a second, never per event.
CREATE TABLE outbox_stream_positions (
    slot         text        PRIMARY KEY,
    committed_at timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL
);

-- +goose Down
DROP TABLE IF EXISTS outbox_stream_positions;
