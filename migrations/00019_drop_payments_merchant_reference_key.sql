-- +goose NO TRANSACTION
-- +goose Up

-- The contract step of 00015_write_amplification.sql (README "Migrations"),
-- shipped in the first release after the one that stopped naming
-- payments_merchant_reference_key (the release of 00017, which carried
-- 00015's fix). The release before 00015, whose insertPayment named the
-- index's predicate in ON CONFLICT, can no longer run beside this one:
-- rolling upgrades are supported from the previous release only.
--
-- Dropping it makes the payments' moves HOT again: no index uses state any
-- more (TestMovesThatKeepTheReferenceAreHOTUpdates applies this file).
-- payments_held_reference_key, built by 00015, enforces the same rule.
DROP INDEX CONCURRENTLY IF EXISTS payments_merchant_reference_key;

-- +goose Down
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS payments_merchant_reference_key
    ON payments (tenant_id, account_id, merchant_reference)
    WHERE state NOT IN ('DECLINED', 'CANCELED');
