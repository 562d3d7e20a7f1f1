-- +goose Up

-- The contract step of 00042 (api_keys_revocable): the release before it
-- read and wrote api_keys; since 00042's release keys live in
-- tenant_api_keys alone.
DROP TRIGGER tenant_api_keys_revoke_legacy ON tenant_api_keys;
DROP FUNCTION tenant_api_keys_revoke_legacy();
DROP TRIGGER api_keys_follow_revocations ON api_keys;
DROP FUNCTION api_keys_follow_revocations();
DROP TABLE api_keys;

-- +goose Down
CREATE TABLE api_keys (
    tenant_id   text        PRIMARY KEY,
    secret_hash bytea       NOT NULL UNIQUE,
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL
);
