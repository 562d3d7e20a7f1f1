-- +goose Up

-- api_keys held one secret per tenant, replaced by each start-up's API_KEYS.
-- A tenant now holds several keys, each revocable for good: a key is a row
-- of tenant_api_keys, with an id the operator names it by, and a revoked
-- key keeps its row (revoked_at) so that nothing can add it again.
--
-- Expand only: the previous release still upserts api_keys (ON CONFLICT on
-- its tenant_id) and authenticates against it during a rolling upgrade, so
-- api_keys stays until the contract step (migrations/pending). The
-- triggers below keep the two tables agreeing while both releases run.
CREATE TABLE tenant_api_keys (
    id           text        PRIMARY KEY,
    tenant_id    text        NOT NULL,
    -- HMAC-SHA256 of the secret under API_KEY_PEPPER, or its plain SHA-256
    -- (rows stored without a pepper, and every row copied from api_keys).
    secret_hash  bytea       NOT NULL UNIQUE,
    created_at   timestamptz NOT NULL,
    last_used_at timestamptz,
    revoked_at   timestamptz
);
CREATE INDEX tenant_api_keys_tenant ON tenant_api_keys (tenant_id, created_at);

-- Every stored key keeps working: its SHA-256 is copied as it is.
INSERT INTO tenant_api_keys (id, tenant_id, secret_hash, created_at)
SELECT 'key_' || replace(gen_random_uuid()::text, '-', ''), tenant_id, secret_hash, created_at
FROM api_keys;

-- The previous release's start-up upserts its API_KEYS into api_keys. A
-- secret revoked here is not written there (the previous release would
-- accept it again), and any other is added here if absent, as this
-- release's API_KEYS does.
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

-- A key revoked here leaves api_keys, so that the previous release's
-- instances stop accepting it too (within their cache's 10 s).
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

-- +goose Down
DROP TRIGGER tenant_api_keys_revoke_legacy ON tenant_api_keys;
DROP FUNCTION tenant_api_keys_revoke_legacy();
DROP TRIGGER api_keys_follow_revocations ON api_keys;
DROP FUNCTION api_keys_follow_revocations();
DROP TABLE tenant_api_keys;
