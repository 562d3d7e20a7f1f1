-- +goose Up

-- The contract step of 00042 (api_keys_revocable), one release after it.
-- The release before 00042 read and wrote api_keys; since 00042's release,
-- keys live in tenant_api_keys alone, so nothing reads this table now.
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
-- +goose StatementBegin
CREATE FUNCTION api_keys_follow_revocations() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT FROM tenant_api_keys WHERE secret_hash = NEW.secret_hash AND revoked_at IS NOT NULL) THEN
        RETURN NULL;
    END IF;
    INSERT INTO tenant_api_keys (id, tenant_id, secret_hash, created_at)
    VALUES ('key_' || replace(gen_random_uuid()::text, '-', ''), NEW.tenant_id, NEW.secret_hash, NEW.updated_at)
    ON CONFLICT (secret_hash) DO NOTHING;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER api_keys_follow_revocations BEFORE INSERT OR UPDATE ON api_keys
FOR EACH ROW EXECUTE FUNCTION api_keys_follow_revocations();
-- +goose StatementBegin
CREATE FUNCTION tenant_api_keys_revoke_legacy() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM api_keys WHERE secret_hash = NEW.secret_hash;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER tenant_api_keys_revoke_legacy AFTER UPDATE OF revoked_at ON tenant_api_keys
FOR EACH ROW WHEN (NEW.revoked_at IS NOT NULL) EXECUTE FUNCTION tenant_api_keys_revoke_legacy();
