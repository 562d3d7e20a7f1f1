-- +goose Up

-- The contract step of 00043 (webhook_secrets_sealed): the release before
-- it signed with webhook_endpoints.secret and previous_secret; since
-- 00043's release the secrets live sealed alone. A secret still in the
-- clear was written by that earlier release during the upgrade and never
-- used since: this step refuses to drop it (it would be lost) until a
-- server of 00043's release or later, with SECRETS_KEY, has started once
-- and sealed it.
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT FROM webhook_endpoints WHERE secret <> '' OR previous_secret <> '') THEN
        RAISE EXCEPTION 'webhook endpoints hold secrets not sealed yet'
            USING HINT = 'start a paymentsapi server with SECRETS_KEY set once (it seals them), then migrate again';
    END IF;
END;
$$;
-- +goose StatementEnd
DROP TRIGGER webhook_endpoints_follow_plaintext_rotation ON webhook_endpoints;
DROP FUNCTION webhook_endpoints_follow_plaintext_rotation();
ALTER TABLE webhook_endpoints DROP COLUMN secret, DROP COLUMN previous_secret;

-- +goose Down
ALTER TABLE webhook_endpoints ADD COLUMN secret text NOT NULL DEFAULT '', ADD COLUMN previous_secret text;
