-- +goose Up

-- refuse raises an error with the given SQLSTATE, message and detail. It
-- lets one statement enforce its own precondition in the database: a
-- statement whose guard fails calls it, the error aborts the transaction,
-- and nothing the transaction wrote is kept (issue 8).
--
-- That is what lets the service send a transaction's statements as one
-- pipelined batch with no BEGIN and no COMMIT: PostgreSQL runs the
-- statements of one extended-protocol batch (up to its Sync) as one
-- implicit transaction, so a batch is all or nothing, in one round trip and
-- one commit. But a check made in Go after the server answered would come
-- too late: the implicit transaction has committed by then. So every check
-- that must undo the batch (the fencing token of an idempotency key, a
-- guarded state move, a claim that found its key taken, a merchant
-- reference held by another payment, a refund above what is left) is made
-- by the statement itself, with refuse. The codes (class PA, which
-- PostgreSQL does not use) are mapped back to Go errors where the statements
-- are written:
--
--   PA001  the idempotency key is no longer the writer's (fenced)
--   PA002  the idempotency key is taken (a claim found it claimed)
--   PA003  a guarded state move found the row no longer in its state
--   PA1xx  an operation's own refusals (internal/payments, internal/refunds)
--
-- VOLATILE (the default) so that the planner never evaluates it ahead of
-- time: it only runs when the guard's CASE reaches it.
-- +goose StatementBegin
CREATE FUNCTION refuse(code text, message text, detail text DEFAULT '') RETURNS integer
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = code, MESSAGE = message, DETAIL = detail;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION refuse(text, text, text);
