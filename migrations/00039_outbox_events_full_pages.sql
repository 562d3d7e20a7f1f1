-- +goose Up

-- outbox_events: full pages again. 00015 left 30% of each page free
-- (fillfactor 70) for the polling relay's claims and marks, which rewrote
-- every event three or four times. Since 00033 an event is inserted and
-- never written again (the relay reads the inserts from a logical
-- replication slot; nothing updates the table), so that room was never
-- used: the event log took 43% more pages than its rows need, each read of
-- it (GET /events, a catch-up, clean-up) and each checkpoint's page images
-- with it. Only pages filled from now on are full; setting a fillfactor
-- takes a lock that neither reads nor writes wait for.
ALTER TABLE outbox_events RESET (fillfactor);

-- +goose Down
ALTER TABLE outbox_events SET (fillfactor = 70);
