package idempotency

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Errors returned by the store.
var (
	// ErrNotFound: no record for the scope.
	ErrNotFound = errors.New("idempotency key not found")
	// ErrFenced: the write was refused because the writer's fencing token is
	// no longer the key's: another request took the key over.
	ErrFenced = errors.New("idempotency key taken over by another owner")
)

// Querier is what the store needs from a connection, pool or transaction.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Claim inserts a new record owned by the caller with fencing token 1 and a
// lease until now+lease. It reports false, without error, when the scope is
// already taken: the row inserted first is the lock. A concurrent claim of the
// same scope waits for the first transaction to end.
func Claim(ctx context.Context, q Querier, scope Scope, fingerprint []byte, paymentID string, now time.Time, lease time.Duration) (bool, error) {
	tag, err := q.Exec(ctx, `
		INSERT INTO idempotency_keys
		    (tenant_id, operation, idempotency_key, fingerprint, payment_id,
		     fencing_token, lease_expires_at, created_at)
		VALUES ($1, $2, $3, $4, $5, 1, $6, $7)
		ON CONFLICT (tenant_id, operation, idempotency_key) DO NOTHING`,
		scope.Tenant, scope.Operation, scope.Key, fingerprint, paymentID, now.Add(lease), now)
	if err != nil {
		return false, fmt.Errorf("claim idempotency key: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

const selectRecord = `
	SELECT tenant_id, operation, idempotency_key, fingerprint, payment_id, fencing_token,
	       lease_expires_at, response_status, response_headers, response_body,
	       created_at, completed_at
	FROM idempotency_keys`

// Load returns the record of scope, or ErrNotFound.
func Load(ctx context.Context, q Querier, scope Scope) (Record, error) {
	return scanRecord(q.QueryRow(ctx, selectRecord+`
		WHERE tenant_id = $1 AND operation = $2 AND idempotency_key = $3`,
		scope.Tenant, scope.Operation, scope.Key))
}

// LoadByPayment returns the record that created paymentID, or ErrNotFound.
func LoadByPayment(ctx context.Context, q Querier, paymentID string) (Record, error) {
	return scanRecord(q.QueryRow(ctx, selectRecord+` WHERE payment_id = $1`, paymentID))
}

func scanRecord(row pgx.Row) (Record, error) {
	var (
		r       Record
		status  *int32
		headers []byte
		body    []byte
	)
	err := row.Scan(&r.Scope.Tenant, &r.Scope.Operation, &r.Scope.Key, &r.Fingerprint,
		&r.PaymentID, &r.FencingToken, &r.LeaseExpiresAt, &status, &headers, &body,
		&r.CreatedAt, &r.CompletedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Record{}, ErrNotFound
	}
	if err != nil {
		return Record{}, fmt.Errorf("load idempotency key: %w", err)
	}
	if status != nil {
		r.Response = &Response{Status: int(*status), Body: body}
		if len(headers) > 0 {
			if err := json.Unmarshal(headers, &r.Response.Headers); err != nil {
				return Record{}, fmt.Errorf("decode stored headers: %w", err)
			}
		}
	}
	return r, nil
}

// TakeOver atomically makes the caller the owner of a key that has no live
// owner and no final answer, as last seen with token seen. It returns the new
// fencing token, or ok=false when someone else got there first (or the
// original finished): exactly one of any number of concurrent takers wins.
func TakeOver(ctx context.Context, q Querier, scope Scope, seen int64, now time.Time, lease time.Duration) (token int64, ok bool, err error) {
	err = q.QueryRow(ctx, `
		UPDATE idempotency_keys
		SET fencing_token = fencing_token + 1, lease_expires_at = $5
		WHERE tenant_id = $1 AND operation = $2 AND idempotency_key = $3
		  AND fencing_token = $4
		  AND response_status IS NULL AND completed_at IS NULL
		  AND (lease_expires_at IS NULL OR lease_expires_at <= $6)
		RETURNING fencing_token`,
		scope.Tenant, scope.Operation, scope.Key, seen, now.Add(lease), now).Scan(&token)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("take over idempotency key: %w", err)
	}
	return token, true, nil
}

// QueueFinish adds to b the statement that stores resp as the key's final
// answer and ends the lease, provided token is still the key's fencing token;
// otherwise the batch fails with ErrFenced.
func QueueFinish(b *pgx.Batch, paymentID string, token int64, resp Response, now time.Time) {
	headers, _ := json.Marshal(resp.Headers) // map[string]string always marshals
	b.Queue(`
		UPDATE idempotency_keys
		SET response_status = $3, response_headers = $4, response_body = $5,
		    completed_at = $6, lease_expires_at = NULL
		WHERE payment_id = $1 AND fencing_token = $2 AND response_status IS NULL`,
		paymentID, token, resp.Status, headers, resp.Body, now).Exec(fenced)
	queueNotify(b, paymentID)
}

// QueueRenew adds to b the statement that extends the owner's lease to
// until, provided token is still the key's fencing token; otherwise the batch
// fails with ErrFenced. An owner renews before each provider call, so that a
// lookup followed by a charge never outlives its lease.
func QueueRenew(b *pgx.Batch, paymentID string, token int64, until time.Time) {
	b.Queue(`
		UPDATE idempotency_keys SET lease_expires_at = $3
		WHERE payment_id = $1 AND fencing_token = $2 AND response_status IS NULL`,
		paymentID, token, until).Exec(fenced)
}

// QueueRelease adds to b the statement that ends the caller's lease without
// a final answer (the outcome is unknown, or the provider refused), so that
// the next retry or the reconciler may take the key over at once.
func QueueRelease(b *pgx.Batch, paymentID string, token int64) {
	b.Queue(`
		UPDATE idempotency_keys SET lease_expires_at = NULL
		WHERE payment_id = $1 AND fencing_token = $2 AND response_status IS NULL`,
		paymentID, token).Exec(fenced)
	queueNotify(b, paymentID)
}

// queueNotify tells waiting requests, on every instance, that the key of
// paymentID changed. PostgreSQL delivers it only if the transaction commits.
func queueNotify(b *pgx.Batch, paymentID string) {
	b.Queue(`SELECT pg_notify($1, $2)`, NotifyChannel, paymentID)
}

func fenced(tag pgconn.CommandTag) error {
	if tag.RowsAffected() != 1 {
		return ErrFenced
	}
	return nil
}
