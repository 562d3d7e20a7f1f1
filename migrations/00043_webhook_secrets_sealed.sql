-- +goose Up

-- Webhook endpoints' signing secrets are stored sealed (package secretbox:
-- AES-256-GCM under SECRETS_KEY, bound to the endpoint's id) in
-- secret_sealed and previous_secret_sealed; the plaintext columns secret
-- and previous_secret are left empty ('' and NULL).
--
-- Expand only. The previous release still signs with secret and
-- previous_secret, and writes them when it creates or rotates an endpoint,
-- during a rolling upgrade:
--   - an endpoint it writes has no sealed secret; this release seals it at
--     its first use (a delivery, a reveal, a rotation) or at its next
--     start, and empties the plaintext (internal/endpoints, SealLegacy);
--   - its rotation of an endpoint whose secret is sealed moves the
--     plaintext secret ('') into previous_secret and writes a new one: the
--     trigger below moves the sealed secret along in the same way, so that
--     the rotated-out secret keeps signing for its 24 hours;
--   - it cannot sign for an endpoint whose secret is sealed (it reads ''):
--     such an attempt fails before anything is sent ("the message cannot
--     be signed") and the message is retried on its schedule, by then by
--     an upgraded instance.
-- The contract step (migrations/pending/webhook_secrets_contract.sql)
-- drops the plaintext columns and this trigger; this release reads them
-- only to seal what the previous release wrote, and not at all once they
-- are gone.
ALTER TABLE webhook_endpoints
    ADD COLUMN secret_sealed          text,
    ADD COLUMN previous_secret_sealed text,
    ALTER COLUMN secret SET DEFAULT '';

-- +goose StatementBegin
CREATE FUNCTION webhook_endpoints_follow_plaintext_rotation() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.previous_secret_sealed := OLD.secret_sealed;
    NEW.secret_sealed := NULL;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER webhook_endpoints_follow_plaintext_rotation BEFORE UPDATE OF secret ON webhook_endpoints
FOR EACH ROW WHEN (NEW.secret <> '' AND NEW.secret IS DISTINCT FROM OLD.secret)
EXECUTE FUNCTION webhook_endpoints_follow_plaintext_rotation();

-- The answers stored for replay of the keys that created or rotated an
-- endpoint held its secret: a replay now answers "secret": null with
-- "secretShownOnce": true instead (GET /webhook-endpoints/{id}/secret
-- reveals it). Those the previous release stores during the upgrade are
-- erased with every answer at the end of the replay window.
UPDATE idempotency_keys
SET response_body = convert_to(regexp_replace(convert_from(response_body, 'UTF8'),
        '"secret":"whsec_[A-Za-z0-9+/=]*"', '"secret":null,"secretShownOnce":true', 'g'), 'UTF8')
WHERE operation IN ('create_webhook_endpoint', 'rotate_webhook_secret') AND response_body IS NOT NULL
  AND position('whsec_' IN convert_from(response_body, 'UTF8')) > 0;

-- +goose Down
DROP TRIGGER webhook_endpoints_follow_plaintext_rotation ON webhook_endpoints;
DROP FUNCTION webhook_endpoints_follow_plaintext_rotation();
ALTER TABLE webhook_endpoints
    ALTER COLUMN secret DROP DEFAULT,
    DROP COLUMN previous_secret_sealed,
    DROP COLUMN secret_sealed;
