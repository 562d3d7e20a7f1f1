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
-- its state alone); the trigger below keeps what the previous release
-- writes from leaving a name that is not true.
--
-- No transaction (like 00017 and 00018): each statement commits on its
-- own; every statement may run again after a failure.
ALTER TABLE payments ADD COLUMN IF NOT EXISTS held_by text;

-- The previous release neither clears held_by when it ends a hold nor sets
-- it when it takes one, so a name it leaves behind could be read by this
-- release as the holder of a later hold the previous release took: that
-- hold's action would never move the payment on. The database keeps the
-- name honest whoever writes: a move out of the held states clears it, and
-- a move into them that leaves it as it was (the previous release's)
-- clears it too, so that the hold reads as unnamed (by its state alone).
-- The trigger runs only on those rows (WHEN): an automatic payment, whose
-- held_by is always NULL, never calls it.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION payments_keep_held_by_honest() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.held_by := NULL;
    RETURN NEW;
END
$$;
-- +goose StatementEnd
DROP TRIGGER IF EXISTS payments_keep_held_by_honest ON payments;
CREATE TRIGGER payments_keep_held_by_honest BEFORE UPDATE OF state ON payments
    FOR EACH ROW WHEN (NEW.held_by IS NOT NULL AND (
        NEW.state NOT IN ('CAPTURE_REQUESTED', 'VOID_REQUESTED')
        OR (OLD.state NOT IN ('CAPTURE_REQUESTED', 'VOID_REQUESTED') AND NEW.held_by IS NOT DISTINCT FROM OLD.held_by)))
    EXECUTE FUNCTION payments_keep_held_by_honest();

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
DROP TRIGGER IF EXISTS payments_keep_held_by_honest ON payments;
DROP FUNCTION IF EXISTS payments_keep_held_by_honest();
DELETE FROM state_machine_moves
    WHERE machine = 'payment_action' AND from_state = 'FAILED_RETRYABLE' AND to_state = 'DECLINED';
ALTER TABLE payments DROP CONSTRAINT IF EXISTS payments_manual_captured_check;
ALTER TABLE payments DROP COLUMN IF EXISTS held_by;
