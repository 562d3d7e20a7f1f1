-- +goose NO TRANSACTION
-- +goose Up

-- Contract step of 00023 (issue 18): once no release that takes a manual
-- payment's hold without naming it, or leaves it without clearing it, is
-- running, a payment names a holder only while an action holds it.
-- (Holds taken before 00023 name none: the code still reads those by their
-- state alone, and may, once none is left.)
ALTER TABLE payments DROP CONSTRAINT IF EXISTS payments_held_by_check;
UPDATE payments SET held_by = NULL
    WHERE held_by IS NOT NULL AND state NOT IN ('CAPTURE_REQUESTED', 'VOID_REQUESTED');
ALTER TABLE payments ADD CONSTRAINT payments_held_by_check
    CHECK (held_by IS NULL OR state IN ('CAPTURE_REQUESTED', 'VOID_REQUESTED')) NOT VALID;
ALTER TABLE payments VALIDATE CONSTRAINT payments_held_by_check;

-- +goose Down
ALTER TABLE payments DROP CONSTRAINT IF EXISTS payments_held_by_check;
