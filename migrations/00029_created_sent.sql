-- +goose Up

-- A payment or a refund is created already sent (issue 22): the claim's
-- transaction inserts it in PROVIDER_REQUEST_SENT, with its first and last
-- send, rather than in RECEIVED followed by an UPDATE to the sent state
-- (one row version and one statement fewer per new payment). Its audit
-- still records both: the creation in RECEIVED, then the move to sent
-- (statemachine.Machine.CreatedAs). The machines allow that creation, and
-- no other: the trigger refuses a row created in any other state.
-- Expand-only: the release before this one still creates in RECEIVED and
-- moves, which stays allowed.
INSERT INTO state_machine_moves (machine, from_state, to_state) VALUES
    ('payment', '', 'PROVIDER_REQUEST_SENT'),
    ('refund', '', 'PROVIDER_REQUEST_SENT');

-- +goose Down
-- (Rows created so stay as they are: the trigger checks creations only.)
DELETE FROM state_machine_moves
WHERE machine IN ('payment', 'refund') AND from_state = '' AND to_state = 'PROVIDER_REQUEST_SENT';
