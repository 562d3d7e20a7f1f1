-- +goose NO TRANSACTION
-- +goose Up

-- The listings' indexes, ascending (issue 22). GET /payments reads a
-- tenant's (or an account's) payments newest first; an index declared
-- DESC put every new payment at its left edge, where page splits leave
-- pages half full (231 MB against 130 MB for 2 million payments). Built
-- ascending, new entries fill the right edge, and the listing reads the
-- same index backwards: a keyset page is still one bounded index scan.
--
-- Built CONCURRENTLY, so that payments are not blocked while a large table
-- is indexed; hence no transaction. Each statement may be run again: goose
-- records the migration only after the last one, and a CONCURRENTLY build
-- that failed leaves an invalid index, which the DROP before each CREATE
-- removes. No release names these indexes, so the old ones go at once.
DROP INDEX CONCURRENTLY IF EXISTS payments_tenant_listing_idx;
CREATE INDEX CONCURRENTLY payments_tenant_listing_idx ON payments (tenant_id, created_at, id);
DROP INDEX CONCURRENTLY IF EXISTS payments_tenant_created_idx;
DROP INDEX CONCURRENTLY IF EXISTS payments_account_listing_idx;
CREATE INDEX CONCURRENTLY payments_account_listing_idx ON payments (tenant_id, account_id, created_at, id);
DROP INDEX CONCURRENTLY IF EXISTS payments_tenant_account_created_idx;

-- +goose Down
CREATE INDEX CONCURRENTLY IF NOT EXISTS payments_tenant_created_idx ON payments (tenant_id, created_at DESC, id DESC);
CREATE INDEX CONCURRENTLY IF NOT EXISTS payments_tenant_account_created_idx ON payments (tenant_id, account_id, created_at DESC, id DESC);
DROP INDEX CONCURRENTLY IF EXISTS payments_account_listing_idx;
DROP INDEX CONCURRENTLY IF EXISTS payments_tenant_listing_idx;
