-- +goose Up

-- Money safety III (issue 17): a lookup's "not found" is certain only once
-- the provider's lookup lag has passed since the latest request that may
-- have reached it. first_sent_at cannot say when that was: it is the first
-- send (the provider's key window runs from it), and a refusal clears it,
-- although a refused request may have been processed all the same.
--
-- last_sent_at: when the latest request for the key's resource left for the
-- provider, refused or not. Written with each send, never cleared.
--
-- Expand only: a nullable column, which the previous release neither reads
-- nor writes, so it keeps running while instances upgrade (README,
-- "Migrations").
ALTER TABLE idempotency_keys ADD COLUMN IF NOT EXISTS last_sent_at timestamptz;

-- An unfinished key written before this migration may have sent a request at
-- any time until now: now is the one bound that is never too early. (A key
-- that never sent one waits one lookup lag longer before it is canceled.)
UPDATE idempotency_keys SET last_sent_at = now()
WHERE response_status IS NULL AND completed_at IS NULL AND last_sent_at IS NULL;

-- A refund has no canceled end, so its key is never abandoned; 00009 gave
-- the unfinished ones an abandon_at anyway, which made the reconciler look
-- at a refund waiting for its client again and again (the release of such
-- a key booked its next look at abandon_at, long past).
UPDATE idempotency_keys SET abandon_at = NULL
WHERE operation = 'create_refund' AND abandon_at IS NOT NULL;

-- +goose Down
ALTER TABLE idempotency_keys DROP COLUMN IF EXISTS last_sent_at;
