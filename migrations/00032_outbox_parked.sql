-- +goose Up

-- The events the outbox's stream reader (internal/outbox/stream) set aside:
-- one whose publish kept failing (last_error set), and the later events of
-- its aggregate, which wait behind it (waits_for) so that an aggregate's
-- events are first published in order. The stream itself has moved on: this
-- table is all that remembers them. An operator's unpark sets released_at on
-- an aggregate's rows; the reader then publishes them all, in seq order, and
-- deletes them. Rows are few (none while the broker takes every event).
CREATE TABLE outbox_parked (
    event_id       uuid        PRIMARY KEY REFERENCES outbox_events (id),
    aggregate_type text        NOT NULL,
    aggregate_id   text        NOT NULL,
    seq            bigint      NOT NULL,
    attempts       integer     NOT NULL,
    last_error     text,
    waits_for      uuid,
    parked_at      timestamptz NOT NULL,
    released_at    timestamptz,
    CHECK ((last_error IS NULL) <> (waits_for IS NULL))
);
CREATE INDEX outbox_parked_aggregate_idx ON outbox_parked (aggregate_type, aggregate_id, seq);

-- +goose Down
DROP TABLE IF EXISTS outbox_parked;
