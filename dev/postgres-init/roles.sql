-- The service's two roles, made once when docker-compose.yml's PostgreSQL
-- first starts (the image runs this file as its superuser, in the database
-- payments). docs/operations.md, "Roles and grants", explains them:
-- paymentsapi_owner owns the schema and applies the migrations (the
-- migrate service); paymentsapi_app runs the api and ledger services with
-- MIGRATE=false, with the grants below and nothing else. The passwords are
-- the demo's: change them anywhere else.

CREATE ROLE paymentsapi_owner LOGIN PASSWORD 'owner';
-- No REPLICATION: the outbox relay polls the table (OUTBOX_RELAY=auto).
CREATE ROLE paymentsapi_app LOGIN PASSWORD 'app';
ALTER DATABASE payments OWNER TO paymentsapi_owner;
-- Refusals stay out of the server's log (migration 00016).
GRANT SET ON PARAMETER log_min_messages TO paymentsapi_owner;

-- The application role's grants, as the owner, so that the default
-- privileges hold for what the owner's migrations create.
SET ROLE paymentsapi_owner;
GRANT USAGE ON SCHEMA public TO paymentsapi_app;
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO paymentsapi_app;
GRANT EXECUTE ON ALL ROUTINES IN SCHEMA public TO paymentsapi_app;
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO paymentsapi_app;
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT EXECUTE ON ROUTINES TO paymentsapi_app;
RESET ROLE;
