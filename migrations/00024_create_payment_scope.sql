-- +goose Up

-- The payments' key scope is renamed from 'payments.create' to
-- 'create_payment' (one naming scheme, verb_noun), in three releases, so
-- that a retry during a rolling upgrade always finds its key
-- (docs/operations.md, "Migrations"). This release only reads both names;
-- nobody writes the new one yet, so it needs nothing of the schema. The
-- unique index that makes one scope of the two names ships with the next
-- release (migrations/pending/create_payment_scope_move.sql), the first
-- that writes the new name: built here, it would make the previous
-- release's claims (ON CONFLICT on its own arbiter) fail with a unique
-- violation when two of them race on one key.
SELECT 1;

-- +goose Down
SELECT 1;
