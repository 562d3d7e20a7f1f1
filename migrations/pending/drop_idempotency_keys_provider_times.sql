-- +goose Up

-- The contract step of 00017_last_sent.sql (README "Migrations").
--
-- Not a migration yet: it ships in the first release after the one that
-- moved the provider history from the key to the resource (00017): move it
-- to migrations/ with the next free number then, and delete this
-- paragraph. Until then the release before 00017 may still run beside the
-- current one during a rolling upgrade: it reads and writes the key's
-- first_sent_at, and reads its abandon_at, which the trigger writes.
DROP TRIGGER IF EXISTS idempotency_keys_abandon_at ON idempotency_keys;
DROP FUNCTION IF EXISTS idempotency_keys_abandon_at();
ALTER TABLE idempotency_keys DROP COLUMN IF EXISTS first_sent_at, DROP COLUMN IF EXISTS abandon_at;

-- +goose Down
ALTER TABLE idempotency_keys ADD COLUMN IF NOT EXISTS first_sent_at timestamptz, ADD COLUMN IF NOT EXISTS abandon_at timestamptz;
