-- +goose NO TRANSACTION
-- +goose Up

-- Manual capture's holds name their holder (issue 18).
--
-- A capture or a void takes a manual payment's authorization by moving it
-- out of AUTHORIZED (CAPTURE_REQUESTED, VOID_REQUESTED). From this release
-- on, that move also names the action that made it (held_by), and only
-- that action moves the payment on: a cancel that never held the payment
-- (its claim found a payment that moved no money, which turned out
-- authorized after all) can no longer hand back another action's hold.
--
-- Expand only (docs/operations.md, "Migrations"): the previous release neither reads
-- nor writes held_by; it takes holds without naming them, and this
-- release's code treats an unnamed hold as the previous release did (by
-- its state alone). The CHECK that only a held payment names a holder is a
-- contract step for a later release (migrations/pending): the previous
-- release's moves out of a hold do not clear the column.
--
-- No transaction (like 00017 and 00018): each statement commits on its
-- own; every statement may run again after a failure.
ALTER TABLE payments ADD COLUMN IF NOT EXISTS held_by text;

-- A manual payment that completed was captured, for an amount it records
-- (every release since 00018 writes captured_minor with that move).
ALTER TABLE payments DROP CONSTRAINT IF EXISTS payments_manual_captured_check;
ALTER TABLE payments ADD CONSTRAINT payments_manual_captured_check
    CHECK (capture_method <> 'manual' OR state <> 'COMPLETED' OR captured_minor IS NOT NULL) NOT VALID;
ALTER TABLE payments VALIDATE CONSTRAINT payments_manual_captured_check;

-- A refused capture whose authorization expired before it could be sent
-- again, and that the provider surely never processed, is declined without
-- a call (authorization_expired).
INSERT INTO state_machine_moves (machine, from_state, to_state) VALUES
    ('payment_action', 'FAILED_RETRYABLE', 'DECLINED')
ON CONFLICT DO NOTHING;

-- +goose Down
DELETE FROM state_machine_moves
    WHERE machine = 'payment_action' AND from_state = 'FAILED_RETRYABLE' AND to_state = 'DECLINED';
ALTER TABLE payments DROP CONSTRAINT IF EXISTS payments_manual_captured_check;
ALTER TABLE payments DROP COLUMN IF EXISTS held_by;
