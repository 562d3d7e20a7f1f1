-- +goose Up

-- No function is executable by PUBLIC. PostgreSQL grants EXECUTE to PUBLIC
-- on every new function, so any role that may connect to the database
-- could call refuse, the state machine's checks or the scope move, some of
-- which run with their owner's rights (refuse, 00016). The service's role
-- is given EXECUTE by name instead (docs/operations.md, "Roles and
-- grants").
REVOKE EXECUTE ON ALL ROUTINES IN SCHEMA public FROM PUBLIC;

-- And the functions of later migrations follow. Only the global default
-- can take a privilege away from PUBLIC (a schema's defaults can only add
-- to it); it holds for what the role that migrates creates, which is what
-- every later migration creates.
ALTER DEFAULT PRIVILEGES REVOKE EXECUTE ON ROUTINES FROM PUBLIC;

-- +goose Down
ALTER DEFAULT PRIVILEGES GRANT EXECUTE ON ROUTINES TO PUBLIC;
GRANT EXECUTE ON ALL ROUTINES IN SCHEMA public TO PUBLIC;
