-- +goose NO TRANSACTION
-- +goose Up

-- The filters of GET /payments (docs/INDEXES.md, "payments"). A filter is
-- read through an index, and none of these indexes uses a column that the
-- payments' happy path changes, so its moves stay HOT updates.
--
-- 1. A merchant reference is looked up without its account: the unique
-- index of the payments that hold their reference is built again with the
-- reference before the account. It enforces the same rule (the same
-- columns, the same predicate), and the insert's ON CONFLICT names no index
-- (every unique index is an arbiter), so both may stand together; the old
-- one goes with the contract step (migrations/pending), built in a release
-- of its own, so that no run of this file, even one that failed half-way,
-- can leave the rule without a valid index.
DROP INDEX CONCURRENTLY IF EXISTS payments_reference_holder_key;
CREATE UNIQUE INDEX CONCURRENTLY payments_reference_holder_key
    ON payments (tenant_id, merchant_reference, account_id)
    WHERE holds_reference;

-- 2. The payments that freed their reference (DECLINED, CANCELED: final),
-- by reference and in the listing's order. A payment enters them by the
-- move that frees its reference, which changes holds_reference, a column
-- of the index above's predicate: that move was never a HOT update, and
-- writes one entry more in each. New payments and the other moves write
-- none.
DROP INDEX CONCURRENTLY IF EXISTS payments_freed_reference_idx;
CREATE INDEX CONCURRENTLY payments_freed_reference_idx
    ON payments (tenant_id, merchant_reference)
    WHERE NOT holds_reference;
DROP INDEX CONCURRENTLY IF EXISTS payments_freed_listing_idx;
CREATE INDEX CONCURRENTLY payments_freed_listing_idx
    ON payments (tenant_id, created_at, id)
    WHERE NOT holds_reference;

-- 3. The planner's knowledge that holds_reference follows from state. A
-- listing of declined payments says both (state = 'DECLINED' AND NOT
-- holds_reference, the second so that the partial index above may serve
-- it); taken as independent, the two conditions look a hundred times rarer
-- than they are, and PostgreSQL would rather read every freed payment of
-- the tenant and sort them than scan the listing index for a page. The
-- statistics are computed by ANALYZE; they cost no write.
CREATE STATISTICS IF NOT EXISTS payments_holds_reference_by_state (dependencies) ON state, holds_reference FROM payments;

-- +goose Down
DROP STATISTICS IF EXISTS payments_holds_reference_by_state;
DROP INDEX CONCURRENTLY IF EXISTS payments_freed_listing_idx;
DROP INDEX CONCURRENTLY IF EXISTS payments_freed_reference_idx;
DROP INDEX CONCURRENTLY IF EXISTS payments_reference_holder_key;
