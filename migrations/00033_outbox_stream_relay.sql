-- +goose Up

-- The outbox is published by the stream relay (internal/outbox/stream,
-- issue 22): it reads the outbox's inserts from a logical replication slot,
-- in commit order, and writes nothing per event. What only the polling relay
-- needed goes: the head flags' triggers, kept on every insert and mark, and
-- the three partial indexes its claim and ordering rule read. An insert now
-- costs the row, its primary key and the aggregate index, nothing else.
--
-- Events the polling relay parked move to outbox_parked, where the stream
-- relay keeps what it parks: `paymentsapi outbox parked` lists them and
-- `unpark` releases them as before. Events it had not published are
-- published by the stream relay's first catch-up (no position recorded yet:
-- every event not published and not parked), behind a parked event of their
-- payment when there is one.
--
-- The columns the polling relay wrote (published_at, parked_at, attempts,
-- next_attempt_at, claimed_until, claim_token, head, last_error) stay for
-- now, unwritten: an instance of the previous release, still running during
-- a rolling upgrade, writes them, and publishing from its relay is harmless
-- (at least once). Dropping them is a contract step for a later release.
DROP TRIGGER IF EXISTS outbox_events_head_insert ON outbox_events;
DROP TRIGGER IF EXISTS outbox_events_head_publish ON outbox_events;
DROP TRIGGER IF EXISTS outbox_events_head_republish ON outbox_events;
DROP FUNCTION IF EXISTS outbox_events_unpublished_head();
DROP FUNCTION IF EXISTS outbox_events_published_next_head();
DROP FUNCTION IF EXISTS outbox_events_republished_head();
DROP INDEX IF EXISTS outbox_events_claimable_idx;
DROP INDEX IF EXISTS outbox_events_due_head_idx;
DROP INDEX IF EXISTS outbox_events_unpublished_aggregate_idx;

INSERT INTO outbox_parked (event_id, aggregate_type, aggregate_id, seq, attempts, last_error, parked_at)
SELECT id, aggregate_type, aggregate_id, seq, attempts,
       coalesce(nullif(last_error, ''), 'parked by the polling relay'), parked_at
FROM outbox_events
WHERE parked_at IS NOT NULL AND published_at IS NULL
ON CONFLICT (event_id) DO NOTHING;

-- +goose Down
DELETE FROM outbox_parked p
USING outbox_events e
WHERE e.id = p.event_id AND e.parked_at IS NOT NULL AND e.published_at IS NULL AND p.waits_for IS NULL;

CREATE INDEX outbox_events_claimable_idx ON outbox_events (seq)
    WHERE published_at IS NULL AND parked_at IS NULL;
CREATE INDEX outbox_events_unpublished_aggregate_idx ON outbox_events (aggregate_type, aggregate_id, seq)
    WHERE published_at IS NULL;
CREATE INDEX outbox_events_due_head_idx ON outbox_events (next_attempt_at, seq)
    WHERE published_at IS NULL AND parked_at IS NULL AND head;

-- +goose StatementBegin
CREATE FUNCTION outbox_events_unpublished_head() RETURNS trigger
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM 1 FROM outbox_events e
    WHERE e.aggregate_type = NEW.aggregate_type
      AND e.aggregate_id = NEW.aggregate_id
      AND e.published_at IS NULL
      AND e.seq < NEW.seq
    ORDER BY e.seq
    FOR SHARE;
    NEW.head := NOT FOUND;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION outbox_events_published_next_head() RETURNS trigger
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    UPDATE outbox_events SET head = true
    WHERE id = (
        SELECT e.id FROM outbox_events e
        WHERE e.aggregate_type = NEW.aggregate_type
          AND e.aggregate_id = NEW.aggregate_id
          AND e.published_at IS NULL
        ORDER BY e.seq
        LIMIT 1)
      AND NOT head;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION outbox_events_republished_head() RETURNS trigger
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    earliest boolean;
BEGIN
    PERFORM 1 FROM outbox_events e
    WHERE e.aggregate_type = NEW.aggregate_type
      AND e.aggregate_id = NEW.aggregate_id
      AND e.published_at IS NULL
      AND e.seq < NEW.seq
    ORDER BY e.seq
    FOR SHARE;
    earliest := NOT FOUND;
    UPDATE outbox_events SET head = earliest
    WHERE id = NEW.id AND head <> earliest;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER outbox_events_head_insert BEFORE INSERT ON outbox_events
    FOR EACH ROW WHEN (NEW.published_at IS NULL)
    EXECUTE FUNCTION outbox_events_unpublished_head();
CREATE TRIGGER outbox_events_head_publish AFTER UPDATE OF published_at ON outbox_events
    FOR EACH ROW WHEN (OLD.published_at IS NULL AND NEW.published_at IS NOT NULL)
    EXECUTE FUNCTION outbox_events_published_next_head();
CREATE TRIGGER outbox_events_head_republish
    AFTER UPDATE OF published_at ON outbox_events
    FOR EACH ROW WHEN (OLD.published_at IS NOT NULL AND NEW.published_at IS NULL)
    EXECUTE FUNCTION outbox_events_republished_head();

-- Events written meanwhile are heads where they are their payment's
-- earliest unpublished event (as 00011 set them).
UPDATE outbox_events o SET head = true
WHERE o.published_at IS NULL AND NOT o.head
  AND NOT EXISTS (
      SELECT 1 FROM outbox_events e
      WHERE e.aggregate_type = o.aggregate_type
        AND e.aggregate_id = o.aggregate_id
        AND e.published_at IS NULL
        AND e.seq < o.seq);
