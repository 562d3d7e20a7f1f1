-- +goose NO TRANSACTION
-- +goose Up

-- Write amplification (issue 8): fewer index entries and WAL records per
-- payment, and room on each page for the updates that follow an insert.
--
-- An UPDATE that changes no indexed column and finds room on its page is a
-- HOT update: it writes the new row version next to the old one, and no
-- index entry. Any other UPDATE writes an entry in every index of the table
-- (in a partial index, when the new version meets its predicate), and when
-- the page is full it also writes a lock record and the whole new row on
-- another page. "Indexed" means used in an index's key, expression or
-- predicate; PostgreSQL 15 compares values, so a column set to the value it
-- had does not count. bench/walflow measures all of this per payment
-- (docs/BENCHMARKS.md has the numbers before and after this migration);
-- docs/INDEXES.md is the index-by-index audit that led to it.
--
-- No transaction, like 00005: indexes are built and dropped CONCURRENTLY so
-- that payments keep being written while a large table is indexed, and no
-- statement holds a lock that blocks writes for longer than a catalog
-- change. Every statement may run again after a failure (goose records the
-- migration only once the last one succeeded), so each is idempotent; an
-- old index is dropped only once the one replacing it is built.

-- 1. payments: the state machine's moves become HOT updates.
--
-- The unique index that keeps one live payment per (tenant, account,
-- merchant reference) had the predicate state NOT IN ('DECLINED',
-- 'CANCELED'), so each move (RECEIVED -> PROVIDER_REQUEST_SENT ->
-- COMPLETED) changed an indexed column and wrote an entry in each of the
-- table's four indexes. holds_reference is that predicate as a column, kept
-- by a trigger from the state: it only changes when a payment frees its
-- reference. (A stored generated column would say the same, but adding one
-- rewrites the table under an exclusive lock; a column with a constant
-- default is added at once.)
ALTER TABLE payments ADD COLUMN IF NOT EXISTS holds_reference boolean NOT NULL DEFAULT true;

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION payments_holds_reference() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.holds_reference := NEW.state NOT IN ('DECLINED', 'CANCELED');
    RETURN NEW;
END
$$;
-- +goose StatementEnd

-- Whatever a statement writes, holds_reference follows the state (the list
-- of payments.State.HoldsReference). The condition is checked without
-- calling the function, so a row it already describes costs next to
-- nothing. A BEFORE UPDATE row trigger makes PostgreSQL lock each row
-- before updating it (one more WAL record, see 3.); payments has such a
-- trigger already, the state machine's, so this one adds no record.
CREATE OR REPLACE TRIGGER payments_holds_reference
    BEFORE INSERT OR UPDATE OF state, holds_reference ON payments
    FOR EACH ROW WHEN (NEW.holds_reference IS DISTINCT FROM (NEW.state NOT IN ('DECLINED', 'CANCELED')))
    EXECUTE FUNCTION payments_holds_reference();

-- The payments that freed their reference before the trigger existed.
UPDATE payments SET holds_reference = false
WHERE state IN ('DECLINED', 'CANCELED') AND holds_reference;

-- The same rows as payments_merchant_reference_key, so no existing row can
-- break it. The DROP removes what a failed build left (an invalid index);
-- payments_merchant_reference_key still enforces the rule meanwhile.
DROP INDEX CONCURRENTLY IF EXISTS payments_held_reference_key;
CREATE UNIQUE INDEX CONCURRENTLY payments_held_reference_key
    ON payments (tenant_id, account_id, merchant_reference)
    WHERE holds_reference;

-- 2. outbox_events: the unique index on seq serves no query. Every query
-- that reads by seq reads unpublished rows only, through a partial index
-- (claimable, unpublished_aggregate, due_head, parked), and seq is an
-- identity column (GENERATED ALWAYS): unique without an index. It cost an
-- entry on each insert and on each of the row's non-HOT updates.
DROP INDEX CONCURRENTLY IF EXISTS outbox_events_seq_key;

-- 3. outbox_events: no BEFORE UPDATE trigger. PostgreSQL locks the row (a
-- WAL record of its own) before every UPDATE of a table that has a BEFORE
-- UPDATE row trigger, whatever the trigger's columns and WHEN condition:
-- outbox_events_head_unpublish (00011) made each claim, attempt, mark and
-- head flag pay for it, for the sake of an operator's replay. The replayed
-- row's head flag is now set by an AFTER trigger, under the same rule and
-- the same locks as before: the earlier unpublished events of its aggregate
-- are locked FOR SHARE in seq order (waiting for a publisher of one of them
-- to decide), and the row is a head unless there are any. An AFTER row
-- trigger sees every row its statement changed, so a statement that sends
-- several events of one aggregate round again leaves only the earliest a
-- head.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION outbox_events_republished_head() RETURNS trigger
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

-- Created before the old one goes, so that a replay is never without one.
CREATE OR REPLACE TRIGGER outbox_events_head_republish
    AFTER UPDATE OF published_at ON outbox_events
    FOR EACH ROW WHEN (OLD.published_at IS NOT NULL AND NEW.published_at IS NULL)
    EXECUTE FUNCTION outbox_events_republished_head();
DROP TRIGGER IF EXISTS outbox_events_head_unpublish ON outbox_events;

-- 4. payment_transitions: one index instead of two. The primary key on the
-- identity column id served no query; the audit trail is read by payment,
-- through (payment_id, id). That index becomes the primary key: unique,
-- since id is. A payment's transitions still sort in the order they were
-- written.
--
-- A build that failed half-way left an invalid index: drop it first (only
-- then, and without CONCURRENTLY, which a DO block cannot do; dropping an
-- index nobody uses takes a moment).
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_index
               WHERE indexrelid = to_regclass('payment_transitions_payment_pkey') AND NOT indisvalid) THEN
        DROP INDEX payment_transitions_payment_pkey;
    END IF;
END
$$;
-- +goose StatementEnd
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS payment_transitions_payment_pkey
    ON payment_transitions (payment_id, id);
-- The swap is a catalog change: both columns are NOT NULL already, so
-- nothing is scanned under its exclusive lock.
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_constraint
               WHERE conrelid = 'payment_transitions'::regclass AND conname = 'payment_transitions_pkey') THEN
        ALTER TABLE payment_transitions
            DROP CONSTRAINT payment_transitions_pkey,
            ADD CONSTRAINT payment_transitions_payment_pkey PRIMARY KEY USING INDEX payment_transitions_payment_pkey;
    END IF;
END
$$;
-- +goose StatementEnd
DROP INDEX CONCURRENTLY IF EXISTS payment_transitions_payment_idx;

-- 5. Room for the updates that follow each insert. fillfactor makes inserts
-- stop filling a page at that share of it, so that a row's next versions
-- fit on its own page: a HOT update when no indexed column changes, and
-- otherwise one that logs only the bytes that differ, without a lock
-- record. It applies to pages filled from now on; no page is rewritten.
-- The values are those that bench/walflow found to leave next to no update
-- without room, at 4 and 16 concurrent payments:
--   outbox_events 70: each event's row is wide (its payload) and gets three
--     or four new versions within a second (claim, attempt, mark, head);
--     its rows are deleted after the retention, so the room is reused.
--   payments, refunds 90: each row moves twice through the state machine,
--     a narrow row; payments are kept for ever, so the room is not wasted
--     more than needed (at 100, 4% of the moves at 16 connections found no
--     room and were not HOT).
--   idempotency_keys 90: its two updates change indexed columns anyway;
--     room only keeps them on their page.
-- payment_transitions is never updated and keeps 100.
ALTER TABLE outbox_events SET (fillfactor = 70);
ALTER TABLE payments SET (fillfactor = 90);
ALTER TABLE refunds SET (fillfactor = 90);
ALTER TABLE idempotency_keys SET (fillfactor = 90);

-- payments_merchant_reference_key stays (expand/contract, README
-- "Migrations"): the release before this one names its predicate in
-- insertPayment's ON CONFLICT (tenant_id, account_id, merchant_reference)
-- WHERE state NOT IN ('DECLINED', 'CANCELED'), and during a rolling upgrade
-- its instances run against this schema; without the index every one of
-- their POST /payments fails with 42P10 (no unique index matches the ON
-- CONFLICT). It is dropped one release later, by the contract step
-- migrations/pending/drop_payments_merchant_reference_key.sql. Until then
-- its predicate on state makes the payments' moves non-HOT again (one
-- entry in each of the table's five indexes per move; docs/INDEXES.md).
--
-- This migration dropped the index here when it was first released. A
-- database that ran it then has no such index and runs code that does not
-- need it; goose records only the version, so it does not run this again,
-- and the contract step's DROP ... IF EXISTS finds nothing to do there.

-- +goose Down
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS payments_merchant_reference_key
    ON payments (tenant_id, account_id, merchant_reference)
    WHERE state NOT IN ('DECLINED', 'CANCELED');

ALTER TABLE idempotency_keys RESET (fillfactor);
ALTER TABLE refunds RESET (fillfactor);
ALTER TABLE payments RESET (fillfactor);
ALTER TABLE outbox_events RESET (fillfactor);

CREATE INDEX CONCURRENTLY IF NOT EXISTS payment_transitions_payment_idx
    ON payment_transitions (payment_id, id);
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS payment_transitions_pkey
    ON payment_transitions (id);
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_constraint
               WHERE conrelid = 'payment_transitions'::regclass AND conname = 'payment_transitions_payment_pkey') THEN
        ALTER TABLE payment_transitions
            DROP CONSTRAINT payment_transitions_payment_pkey,
            ADD CONSTRAINT payment_transitions_pkey PRIMARY KEY USING INDEX payment_transitions_pkey;
    END IF;
END
$$;
-- +goose StatementEnd

CREATE OR REPLACE TRIGGER outbox_events_head_unpublish
    BEFORE UPDATE OF published_at ON outbox_events
    FOR EACH ROW WHEN (OLD.published_at IS NOT NULL AND NEW.published_at IS NULL)
    EXECUTE FUNCTION outbox_events_unpublished_head();
DROP TRIGGER IF EXISTS outbox_events_head_republish ON outbox_events;
DROP FUNCTION IF EXISTS outbox_events_republished_head();

CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS outbox_events_seq_key ON outbox_events (seq);

DROP INDEX CONCURRENTLY IF EXISTS payments_held_reference_key;
DROP TRIGGER IF EXISTS payments_holds_reference ON payments;
DROP FUNCTION IF EXISTS payments_holds_reference();
ALTER TABLE payments DROP COLUMN IF EXISTS holds_reference;
