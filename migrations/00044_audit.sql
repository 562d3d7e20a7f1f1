-- +goose Up

-- Who made each move, and under which request: the actor (api:<key id>,
-- reconciler, scheduler, provider-webhook, operator:<name>) and the request
-- id, written by the move's own insert into its machine's audit table.
--
-- Expand only: both columns are nullable, so the previous release, which
-- does not write them, keeps inserting during a rolling upgrade (its
-- records, and every record from before this migration, name no actor).
ALTER TABLE payment_transitions ADD COLUMN IF NOT EXISTS actor text, ADD COLUMN IF NOT EXISTS request_id text;
ALTER TABLE refund_transitions ADD COLUMN IF NOT EXISTS actor text, ADD COLUMN IF NOT EXISTS request_id text;
ALTER TABLE payment_action_transitions ADD COLUMN IF NOT EXISTS actor text, ADD COLUMN IF NOT EXISTS request_id text;

-- The audit log of what changes who may do what, rather than money: API
-- keys created and revoked, webhook endpoints created, rotated and deleted,
-- and operators' actions. Listed newest first (GET /audit-events,
-- `paymentsapi audit`); ids are UUIDv7, in time order.
CREATE TABLE audit_events (
    id          uuid        PRIMARY KEY,
    occurred_at timestamptz NOT NULL,
    actor       text        NOT NULL,
    request_id  text,
    action      text        NOT NULL,
    tenant_id   text,
    target_id   text,
    details     jsonb       NOT NULL DEFAULT '{}'
);
CREATE INDEX audit_events_occurred_idx ON audit_events (occurred_at DESC, id DESC);

-- Append-only: the application role holds UPDATE and DELETE on every
-- table (docs/operations.md, "Roles and grants"), so the refusal is a
-- trigger, which only the table's owner can drop or disable.
-- +goose StatementBegin
CREATE FUNCTION audit_events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit_events is append-only: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER audit_events_append_only BEFORE UPDATE OR DELETE ON audit_events
FOR EACH ROW EXECUTE FUNCTION audit_events_append_only();
CREATE TRIGGER audit_events_no_truncate BEFORE TRUNCATE ON audit_events
FOR EACH STATEMENT EXECUTE FUNCTION audit_events_append_only();

-- +goose Down
DROP TABLE audit_events;
DROP FUNCTION audit_events_append_only();
ALTER TABLE payment_action_transitions DROP COLUMN IF EXISTS actor, DROP COLUMN IF EXISTS request_id;
ALTER TABLE refund_transitions DROP COLUMN IF EXISTS actor, DROP COLUMN IF EXISTS request_id;
ALTER TABLE payment_transitions DROP COLUMN IF EXISTS actor, DROP COLUMN IF EXISTS request_id;
