-- +goose Up

-- A refusal is an answer, not a fault: keep it out of the server's log.
--
-- refuse (00014) raises an error so that a statement can undo its batch.
-- PostgreSQL writes every error to its log (log_min_messages = warning),
-- with its DETAIL, CONTEXT and STATEMENT: four lines. A refusal is the
-- protocol or an operation's rule working as meant: a merchant reference
-- already held, a refund above what is left or of a payment that did not
-- succeed, an owner fenced out by a takeover, a move that lost a race. An
-- operator counting the log's ERROR lines would count clients' mistakes
-- and races the service resolved, and a client that repeats a refused
-- request fills the log. The service logs the refusals it answers itself,
-- at the level each deserves. (Until issue 8 every retry of a taken key
-- was a refusal too, and the log writer cost replays about 12% of their
-- throughput; a claim no longer refuses, see idempotency.Claimed.)
--
-- A function may set a parameter for its own duration; the error is raised
-- inside, where log_min_messages = fatal says not to log it. The client
-- still gets the error, the transaction still aborts; an error raised
-- anywhere else is logged as before.
--
-- log_min_messages is a superuser parameter: a function that sets it runs
-- only for a caller allowed to, unless it runs with its owner's rights
-- (SECURITY DEFINER, with a fixed search_path as such a function must). So
-- refuse is made quiet only when the role that migrates may set the
-- parameter (a superuser, or since PostgreSQL 15 GRANT SET ON PARAMETER
-- log_min_messages). Otherwise it is left as it was, and refusals are
-- logged: slower retries, never a refusal that fails to refuse.
-- +goose StatementBegin
DO $$
DECLARE
    allowed boolean;
BEGIN
    SELECT rolsuper INTO allowed FROM pg_roles WHERE rolname = current_user;
    IF NOT allowed AND current_setting('server_version_num')::int >= 150000 THEN
        -- Dynamic, so that PostgreSQL 14 never parses a function it lacks.
        EXECUTE $q$SELECT has_parameter_privilege('log_min_messages', 'SET')$q$ INTO allowed;
    END IF;
    IF allowed THEN
        ALTER FUNCTION refuse(text, text, text)
            SECURITY DEFINER
            SET search_path = pg_catalog, pg_temp
            SET log_min_messages = fatal;
    ELSE
        RAISE NOTICE 'refuse stays logged: % may not set log_min_messages', current_user;
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
ALTER FUNCTION refuse(text, text, text) SECURITY INVOKER RESET ALL;
