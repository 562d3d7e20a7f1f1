-- +goose Up

-- The contract step of 00043 (webhook_secrets_sealed), one release after
-- it. The release before 00043 signed with webhook_endpoints.secret and
-- previous_secret; since 00043's release the secrets live sealed alone,
-- and the release before this one reads the plaintext columns only to seal
-- what is left in them (and carries on when they are gone). A secret still
-- in the clear was written by the release before 00043 and never used
-- since: this step refuses to drop it (it would be lost) until a server of
-- the previous release, with SECRETS_KEY, has started once and sealed it.
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT FROM webhook_endpoints WHERE secret <> '' OR previous_secret <> '') THEN
        RAISE EXCEPTION 'webhook endpoints hold secrets not sealed yet'
            USING HINT = 'start a server of the previous release with SECRETS_KEY set once (it seals them), then migrate again';
    END IF;
END;
$$;
-- +goose StatementEnd
DROP TRIGGER webhook_endpoints_follow_plaintext_rotation ON webhook_endpoints;
DROP FUNCTION webhook_endpoints_follow_plaintext_rotation();
ALTER TABLE webhook_endpoints DROP COLUMN secret, DROP COLUMN previous_secret;

-- +goose Down
ALTER TABLE webhook_endpoints ADD COLUMN secret text NOT NULL DEFAULT '', ADD COLUMN previous_secret text;
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
