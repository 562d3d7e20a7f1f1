-- +goose Up

-- The dashboard's sessions (package dashboard). A row is found by a hash of
-- the session's token, which only the browser's cookie holds; the secret
-- its holder logged in with is kept sealed under a key derived from that
-- token, so that the table alone opens no session and reveals no secret.
-- Each request re-authenticates the secret as the API does, so a revoked
-- key ends its sessions too. Rows past expires_at are deleted at logins.
--
-- Expand only: a new table, which the previous release never reads.
CREATE TABLE dashboard_sessions (
    token_hash    bytea       PRIMARY KEY,
    sealed_secret bytea       NOT NULL,
    created_at    timestamptz NOT NULL,
    expires_at    timestamptz NOT NULL
);
CREATE INDEX dashboard_sessions_expiry_idx ON dashboard_sessions (expires_at);

-- +goose Down
DROP TABLE dashboard_sessions;
