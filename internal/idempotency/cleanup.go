package idempotency

// The key store's clean-up, run by package cleanup in every instance. Each
// statement handles at most $2 keys with a final answer that is older than
// $1 (completed_at), chosen with SKIP LOCKED so that clean-up never waits
// for, or blocks, live traffic; a key without a final answer is never
// touched, however old. The rows are found by id through ANY(ARRAY(...)),
// so that even a generic (cached) plan never joins them with the whole
// table.
const (
	// EraseExpiredAnswers erases the stored answers past the replay window:
	// a retry then gets 409 IDEMPOTENCY_KEY_EXPIRED with the resource.
	EraseExpiredAnswers = `
		UPDATE idempotency_keys SET response_body = NULL, response_headers = NULL
		WHERE id = ANY(ARRAY(
		    SELECT id FROM idempotency_keys
		    WHERE completed_at IS NOT NULL AND completed_at <= $1 AND response_body IS NOT NULL
		    LIMIT $2 FOR UPDATE SKIP LOCKED))`
	// DeleteExpiredKeys deletes the keys past the metadata window: the key
	// may then be used again.
	DeleteExpiredKeys = `
		DELETE FROM idempotency_keys
		WHERE id = ANY(ARRAY(
		    SELECT id FROM idempotency_keys
		    WHERE completed_at IS NOT NULL AND completed_at <= $1
		    LIMIT $2 FOR UPDATE SKIP LOCKED))`
)
