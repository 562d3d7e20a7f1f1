-- +goose Up

-- The contract step of 00017_last_sent.sql (README "Migrations"), shipped
-- in the first release after the one that moved the provider history from
-- the key to the resource (00017). The release before 00017, which read and
-- wrote the key's first_sent_at and read its abandon_at, can no longer run
-- beside this one: rolling upgrades are supported from the previous release
-- only.
DROP TRIGGER IF EXISTS idempotency_keys_abandon_at ON idempotency_keys;
DROP FUNCTION IF EXISTS idempotency_keys_abandon_at();
ALTER TABLE idempotency_keys DROP COLUMN IF EXISTS first_sent_at, DROP COLUMN IF EXISTS abandon_at;

-- +goose Down
ALTER TABLE idempotency_keys ADD COLUMN IF NOT EXISTS first_sent_at timestamptz, ADD COLUMN IF NOT EXISTS abandon_at timestamptz;
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION idempotency_keys_abandon_at() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.abandon_at := NEW.recovery_next_at;
    RETURN NEW;
END
$$;
-- +goose StatementEnd
CREATE OR REPLACE TRIGGER idempotency_keys_abandon_at
    BEFORE INSERT ON idempotency_keys
    FOR EACH ROW WHEN (NEW.operation = 'payments.create' AND NEW.abandon_at IS NULL)
    EXECUTE FUNCTION idempotency_keys_abandon_at();
