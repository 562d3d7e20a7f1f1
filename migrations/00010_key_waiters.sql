-- +goose Up

-- How many requests wait (Prefer: wait) for this key's owner to finish, on
-- any instance. The owner notifies (pg_notify) only when it is not zero:
-- every notifying transaction serialises its commit on one cluster-wide
-- lock, so a key nobody waits for must not notify. Not indexed: changing it
-- is a HOT update.
ALTER TABLE idempotency_keys ADD COLUMN waiters integer NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE idempotency_keys DROP COLUMN waiters;
