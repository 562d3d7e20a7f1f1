-- +goose Up

-- The relay claims only the head of each aggregate's unpublished events
-- (internal/outbox/relay.go, issue 9 item 8).
--
-- Before this, the claim walked every due unpublished row and dropped, one
-- by one, those waiting behind an earlier unpublished event of their
-- aggregate (a parked one, or one backing off): a payment whose
-- PaymentCreated is parked kept its PaymentSucceeded in every claim's scan,
-- every second, forever. Now each row carries head: true once it is (or may
-- be) the earliest unpublished event of its aggregate, and the claim's
-- index (00010) holds due heads only, so waiting rows cost nothing.
--
-- head is a hint kept by the triggers below, not the ordering rule: the
-- claim still checks that no earlier event of the aggregate is unpublished.
-- A row wrongly flagged would only cost a scan; a row wrongly left
-- unflagged would never be published, so the triggers keep this invariant:
--
--   at every commit, the earliest unpublished event of each aggregate has
--   head = true.
--
-- Only two changes move an aggregate's earliest unpublished event: a row
-- becomes unpublished (inserted, or published_at set back to NULL by an
-- operator's replay), and a row becomes published. The two triggers below
-- make these changes wait for each other through row locks, so that the one
-- deciding second sees what the first committed. Under READ COMMITTED (the
-- service's isolation level) each statement of a trigger function takes a
-- fresh snapshot, and a row locked after a wait is checked again in its
-- latest committed version:
--
--   * A new row locks (FOR SHARE, in seq order) the earlier unpublished
--     events of its aggregate, and is a head if there are none. If one of
--     them is being published, the lock waits for that transaction; the
--     row, published by then, drops out, and the new row sees it published.
--   * A row being published holds its row lock, and so waits for any new
--     row's transaction that locked it; then, in an AFTER trigger (a fresh
--     snapshot), it flags the aggregate's earliest unpublished event, the
--     new row included.
--
-- Row locks live in the rows, not in the shared lock table: a statement
-- that writes the events of many aggregates takes no more shared memory
-- than before. Locks are taken in seq order (the relay's mark locks its
-- row, then the next one), so these waits cannot form a cycle.
ALTER TABLE outbox_events ADD COLUMN head boolean NOT NULL DEFAULT false;

-- A row that becomes unpublished is a head unless an earlier event of its
-- aggregate is unpublished. (seq is assigned before BEFORE triggers run.)
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

-- When a row is published, the aggregate's earliest unpublished event (if
-- any) becomes the head.
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

CREATE TRIGGER outbox_events_head_insert BEFORE INSERT ON outbox_events
    FOR EACH ROW WHEN (NEW.published_at IS NULL)
    EXECUTE FUNCTION outbox_events_unpublished_head();
CREATE TRIGGER outbox_events_head_unpublish BEFORE UPDATE OF published_at ON outbox_events
    FOR EACH ROW WHEN (OLD.published_at IS NOT NULL AND NEW.published_at IS NULL)
    EXECUTE FUNCTION outbox_events_unpublished_head();
CREATE TRIGGER outbox_events_head_publish AFTER UPDATE OF published_at ON outbox_events
    FOR EACH ROW WHEN (OLD.published_at IS NULL AND NEW.published_at IS NOT NULL)
    EXECUTE FUNCTION outbox_events_published_next_head();

-- The rows already waiting: the earliest unpublished event of each
-- aggregate. ALTER TABLE holds its lock until this commits, so no row is
-- written meanwhile without the triggers.
UPDATE outbox_events o SET head = true
WHERE o.published_at IS NULL
  AND NOT EXISTS (
      SELECT 1 FROM outbox_events e
      WHERE e.aggregate_type = o.aggregate_type
        AND e.aggregate_id = o.aggregate_id
        AND e.published_at IS NULL
        AND e.seq < o.seq);

-- +goose Down
DROP TRIGGER outbox_events_head_publish ON outbox_events;
DROP TRIGGER outbox_events_head_unpublish ON outbox_events;
DROP TRIGGER outbox_events_head_insert ON outbox_events;
DROP FUNCTION outbox_events_published_next_head();
DROP FUNCTION outbox_events_unpublished_head();
ALTER TABLE outbox_events DROP COLUMN head;
