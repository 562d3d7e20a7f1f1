-- +goose NO TRANSACTION
-- +goose Up

-- The contract step of 00045 (payments_filters): payments_reference_holder_key
-- enforces the rule of one live payment per (tenant, account, merchant
-- reference) with the reference first, so that GET /payments looks a
-- reference up without its account; the index it replaces costs each new
-- payment an entry for nothing. No release names either index (the
-- insert's ON CONFLICT names none), so dropping it waits only for a release
-- in which 00045 has certainly run to its end.
DROP INDEX CONCURRENTLY IF EXISTS payments_held_reference_key;

-- +goose Down
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS payments_held_reference_key
    ON payments (tenant_id, account_id, merchant_reference)
    WHERE holds_reference;
