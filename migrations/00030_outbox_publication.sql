-- +goose Up

-- The outbox's inserts, published for logical decoding (issue 22): a
-- reader of a replication slot with the pgoutput plugin and this
-- publication (package internal/outbox/stream) gets every event in the
-- order its transaction committed, with nothing written per event to say
-- so. Only inserts: the relay's claims and marks are not events.
--
-- A publication costs nothing until a slot reads it; on a server below
-- wal_level=logical PostgreSQL creates it with a warning, and nothing can
-- read it there. Expand-only: nothing reads it yet but the stream's tests.
CREATE PUBLICATION paymentsapi_outbox FOR TABLE outbox_events WITH (publish = 'insert');

-- +goose Down
DROP PUBLICATION IF EXISTS paymentsapi_outbox;
