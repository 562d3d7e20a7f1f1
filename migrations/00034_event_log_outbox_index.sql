-- +goose NO TRANSACTION
-- +goose Up

-- The event log reads the outbox itself (internal/eventlog, issue 22): a
-- tenant's events, newest first (GET /events and its cursor), by a
-- backward scan of this index. Ascending, so that new entries fill the
-- right edge of each tenant's range. An expression, not a column: the
-- insert of an event is unchanged, and the table is not rewritten.
--
-- Built CONCURRENTLY, so that payments are not blocked while a large
-- outbox is indexed; hence no transaction. The DROP before the CREATE
-- removes the invalid index a failed build leaves.
DROP INDEX CONCURRENTLY IF EXISTS outbox_events_tenant_idx;
CREATE INDEX CONCURRENTLY outbox_events_tenant_idx ON outbox_events ((payload->>'tenantId'), created_at, id);

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS outbox_events_tenant_idx;
