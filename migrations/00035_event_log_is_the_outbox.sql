-- +goose Up

-- The event log is the outbox itself (internal/eventlog, issue 22): the
-- relay no longer copies each event into the table events, so a webhook
-- message, and a resend, refer to the outbox's event, and go with it when
-- clean-up deletes it (which now keeps events the longer of
-- OUTBOX_RETENTION and EVENT_RETENTION).
--
-- NOT VALID: the messages and resends of events the outbox no longer holds
-- (older than the previous release's OUTBOX_RETENTION) stay, with their
-- events in the table events, which the log still reads until
-- EVENT_RETENTION has passed over them; clean-up deletes them with those
-- events (eventlog.DeleteExpired). Every new row is checked.
--
-- Expand only: an instance of the previous release, during a rolling
-- upgrade, still copies events into the table events and fans them out to
-- messages, of events that are in the outbox. Its clean-up of the table
-- events no longer cascades to their messages: those of events the outbox
-- holds go with the outbox's events; those of events only the copy held
-- (finished long before: the retry schedule is 3 days) are left behind
-- while it runs, and nothing reads them.

-- The copy's frontier: the newest event that only the copy holds now. The
-- log reads the copy up to it and the outbox after it (internal/eventlog),
-- so that a page reads neither table's events that the other one holds
-- (the most recent OUTBOX_RETENTION of the copy is the outbox's too).
-- -infinity when the copy holds nothing the outbox does not: the log then
-- reads the outbox alone. One read of each table, once, before the keys
-- below lock the tables (so that payments, which insert into the outbox,
-- wait only for the catalog changes and the commit, not for this read).
CREATE TABLE events_copy_frontier (
    at timestamptz NOT NULL
);
CREATE UNIQUE INDEX events_copy_frontier_one_row ON events_copy_frontier ((true));
INSERT INTO events_copy_frontier (at)
SELECT coalesce(max(c.occurred_at), '-infinity')
FROM events c
WHERE NOT EXISTS (SELECT FROM outbox_events o WHERE o.id = c.id);

ALTER TABLE webhook_messages DROP CONSTRAINT IF EXISTS webhook_messages_event_id_fkey;
ALTER TABLE webhook_messages ADD CONSTRAINT webhook_messages_event_id_fkey
    FOREIGN KEY (event_id) REFERENCES outbox_events (id) ON DELETE CASCADE NOT VALID;
ALTER TABLE webhook_resends DROP CONSTRAINT IF EXISTS webhook_resends_event_id_fkey;
ALTER TABLE webhook_resends ADD CONSTRAINT webhook_resends_event_id_fkey
    FOREIGN KEY (event_id) REFERENCES outbox_events (id) ON DELETE CASCADE NOT VALID;

-- +goose Down
DROP TABLE IF EXISTS events_copy_frontier;

-- Back to the copy: the previous release reads the table events only, so
-- the events written since the upgrade are copied into it, named as the
-- release's operations name them (this release's names, fixed here), and
-- the messages and resends refer to it again.
INSERT INTO events (id, tenant_id, type, aggregate_id, occurred_at, data, recorded_at, traceparent)
SELECT o.id, o.payload->>'tenantId', n.name, o.aggregate_id, o.created_at, o.payload - n.hidden, o.created_at, o.traceparent
FROM outbox_events o
JOIN (VALUES
    ('PaymentCreated', 'payment.created', ARRAY['tenantId']),
    ('PaymentAuthorized', 'payment.authorized', ARRAY['tenantId']),
    ('PaymentSucceeded', 'payment.succeeded', ARRAY['tenantId']),
    ('PaymentDeclined', 'payment.declined', ARRAY['tenantId']),
    ('PaymentCanceled', 'payment.canceled', ARRAY['tenantId']),
    ('RefundCreated', 'refund.created', ARRAY['tenantId', 'accountId']),
    ('RefundSucceeded', 'refund.succeeded', ARRAY['tenantId', 'accountId']),
    ('RefundDeclined', 'refund.declined', ARRAY['tenantId', 'accountId'])
) AS n (type, name, hidden) ON n.type = o.event_type
WHERE jsonb_typeof(o.payload->'tenantId') = 'string' AND o.payload->>'tenantId' <> ''
ON CONFLICT (id) DO NOTHING;
ALTER TABLE webhook_resends DROP CONSTRAINT IF EXISTS webhook_resends_event_id_fkey;
ALTER TABLE webhook_resends ADD CONSTRAINT webhook_resends_event_id_fkey
    FOREIGN KEY (event_id) REFERENCES events (id) ON DELETE CASCADE NOT VALID;
ALTER TABLE webhook_messages DROP CONSTRAINT IF EXISTS webhook_messages_event_id_fkey;
ALTER TABLE webhook_messages ADD CONSTRAINT webhook_messages_event_id_fkey
    FOREIGN KEY (event_id) REFERENCES events (id) ON DELETE CASCADE NOT VALID;
-- Every message and resend was made from an event the copy now holds.
ALTER TABLE webhook_messages VALIDATE CONSTRAINT webhook_messages_event_id_fkey;
ALTER TABLE webhook_resends VALIDATE CONSTRAINT webhook_resends_event_id_fkey;
