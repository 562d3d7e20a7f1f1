-- +goose NO TRANSACTION
-- +goose Up

-- The polling reader of the outbox (internal/outbox/poll), for a server
-- that cannot stream (wal_level below logical, or a role that may not
-- replicate). It reads events in order_xid's order, never past the oldest
-- transaction still running, and keeps one position row: nothing is
-- written per event.
--
-- order_xid: the larger of the writing transaction's id and the xmax of
-- the insert statement's snapshot (above the id of every transaction that
-- had ended when the statement began); 64 bits, so it never wraps. Filled
-- by the default: 8 bytes on the row, and an entry in the index below,
-- whichever reader runs. An event is never below its own transaction's
-- id, so none can commit behind the poller's position; an event inserted
-- after another transaction committed is above that transaction's id, so
-- a payment's events keep their commit order (the package doc of
-- internal/outbox/poll says why both matter).
--
-- Added without a default first, then given one: a default in ADD COLUMN
-- would be computed once and stored for every existing row (or, volatile,
-- rewrite the table under an exclusive lock); this way existing rows keep
-- NULL (events older than the poller, which its first start publishes from
-- the stream's position instead) and only new rows get a value. An
-- instance of the previous release, during a rolling upgrade, names its
-- columns and so fills it too.
ALTER TABLE outbox_events ADD COLUMN IF NOT EXISTS order_xid xid8;
ALTER TABLE outbox_events ALTER COLUMN order_xid
    SET DEFAULT GREATEST(pg_current_xact_id(), pg_snapshot_xmax(pg_current_snapshot()));

-- The poller's read: events after its position, in (order_xid, seq)
-- order. Built CONCURRENTLY, without a transaction; an invalid index a
-- failed build left is dropped first, a valid one kept (as in 00037). Only
-- rows with a value: the older ones are never read by it.
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_index
               WHERE indexrelid = to_regclass('outbox_events_order_xid_idx') AND NOT indisvalid) THEN
        DROP INDEX outbox_events_order_xid_idx;
    END IF;
END
$$;
-- +goose StatementEnd
CREATE INDEX CONCURRENTLY IF NOT EXISTS outbox_events_order_xid_idx ON outbox_events (order_xid) WHERE order_xid IS NOT NULL;

-- The poller's position: every event at or before (order_xid, seq) was
-- published. One row, written once per batch it publishes.
CREATE TABLE IF NOT EXISTS outbox_poll_position (
    one        boolean PRIMARY KEY DEFAULT true CHECK (one),
    order_xid  xid8 NOT NULL,
    seq        bigint NOT NULL,
    updated_at timestamptz NOT NULL
);

-- +goose Down
DROP TABLE IF EXISTS outbox_poll_position;
DROP INDEX CONCURRENTLY IF EXISTS outbox_events_order_xid_idx;
ALTER TABLE outbox_events DROP COLUMN IF EXISTS order_xid;
