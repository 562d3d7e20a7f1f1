-- +goose NO TRANSACTION
-- +goose Up

-- The contract step of 00015_write_amplification.sql (README "Migrations").
--
-- Not a migration yet: package migrations embeds only migrations/*.sql.
-- It ships in the first release after the one that stopped naming
-- payments_merchant_reference_key (the release of 00015's fix): move it to
-- migrations/ with the next free number then, and delete this paragraph.
-- Until then the release before 00015 may still run beside the current one
-- during a rolling upgrade, and its insertPayment names the index's
-- predicate in ON CONFLICT (it fails with 42P10 without it).
--
-- Dropping it makes the payments' moves HOT again: no index uses state any
-- more (TestMovesThatKeepTheReferenceAreHOTUpdates applies this file).
-- payments_held_reference_key, built by 00015, enforces the same rule.
DROP INDEX CONCURRENTLY IF EXISTS payments_merchant_reference_key;

-- +goose Down
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS payments_merchant_reference_key
    ON payments (tenant_id, account_id, merchant_reference)
    WHERE state NOT IN ('DECLINED', 'CANCELED');
