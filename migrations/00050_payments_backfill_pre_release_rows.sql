-- +goose NO TRANSACTION
-- +goose Up

-- Two kinds of rows that releases long gone wrote are brought up to what
-- every release since writes, so that the code reads one shape only:
--
-- 1. Audit records written before 00036 lack their payment's created_at.
--    They get it, and a constraint keeps every record carrying it (every
--    release since 00036 writes it). The index that found the records
--    without it stays until the contract step after this release
--    (migrations/pending/), because the previous release still reads
--    them through it.
-- 2. Holds taken before 00023 (a capture or a void in progress) do not
--    name the action holding them. Each gets the newest action of its kind
--    on its payment, the one that took it (every release since 00023 names
--    the holds it takes).
--
-- Each statement may run again after a failure. The constraint is added
-- NOT VALID, then validated: the scan does not block writes.
UPDATE payment_transitions t SET payment_created_at = p.created_at
FROM payments p
WHERE t.payment_created_at IS NULL AND p.id = t.payment_id;

ALTER TABLE payment_transitions DROP CONSTRAINT IF EXISTS payment_transitions_payment_created_at_check;
ALTER TABLE payment_transitions ADD CONSTRAINT payment_transitions_payment_created_at_check
    CHECK (payment_created_at IS NOT NULL) NOT VALID;
ALTER TABLE payment_transitions VALIDATE CONSTRAINT payment_transitions_payment_created_at_check;

UPDATE payments p SET held_by = (
    SELECT a.id FROM payment_actions a
    WHERE a.payment_id = p.id
      AND a.kind = CASE p.state WHEN 'CAPTURE_REQUESTED' THEN 'capture' ELSE 'void' END
    ORDER BY a.created_at DESC, a.id DESC
    LIMIT 1)
WHERE p.state IN ('CAPTURE_REQUESTED', 'VOID_REQUESTED') AND p.held_by IS NULL;

-- +goose Down
ALTER TABLE payment_transitions DROP CONSTRAINT IF EXISTS payment_transitions_payment_created_at_check;
