package idempotency

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/paymentsapi/paymentsapi/internal/jsontext"
	"github.com/paymentsapi/paymentsapi/internal/refuse"
	"github.com/paymentsapi/paymentsapi/internal/rowset"
)

// This file holds every statement on idempotency_keys that the engine and
// the reconciler run. A row is addressed by its id, and every write of an
// owner is conditioned on its fencing token.

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

const selectRecord = `
	SELECT id, tenant_id, operation, idempotency_key, fingerprint, resource_type, resource_id,
	       fencing_token, lease_expires_at, response_status, response_headers, response_body,
	       created_at, completed_at, manual_review_at
	FROM idempotency_keys`

// selectByScope reads the key of a scope stored under any of the
// operation's names ($2: Renamed).
const selectByScope = selectRecord + ` WHERE tenant_id = $1 AND operation = ANY($2::text[]) AND idempotency_key = $3`

// Load returns the record of scope, or ErrNotFound.
func Load(ctx context.Context, q Querier, scope Scope) (Record, error) {
	return load(ctx, q, scope, []string{scope.Operation})
}

// load returns the record of scope stored under any of names, or
// ErrNotFound.
func load(ctx context.Context, q Querier, scope Scope, names []string) (Record, error) {
	return scanRecord(q.QueryRow(ctx, selectByScope, scope.Tenant, names, scope.Key))
}

// LoadByID returns the record with row id, or ErrNotFound.
func LoadByID(ctx context.Context, q Querier, id int64) (Record, error) {
	return scanRecord(q.QueryRow(ctx, selectRecord+` WHERE id = $1`, id))
}

// LoadByResource returns the record of the key that created res, or
// ErrNotFound.
func LoadByResource(ctx context.Context, q Querier, res Resource) (Record, error) {
	return scanRecord(q.QueryRow(ctx, selectRecord+` WHERE resource_type = $1 AND resource_id = $2`, res.Type, res.ID))
}

func scanRecord(row pgx.Row) (Record, error) {
	var (
		r       Record
		status  *int32
		headers []byte
		body    []byte
	)
	err := row.Scan(&r.ID, &r.Scope.Tenant, &r.Scope.Operation, &r.Scope.Key, &r.Fingerprint,
		&r.Resource.Type, &r.Resource.ID, &r.FencingToken, &r.LeaseExpiresAt, &status, &headers, &body,
		&r.CreatedAt, &r.CompletedAt, &r.ManualReviewAt)
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

// TakeOver atomically makes the caller the owner of key row id, which had
// no live owner and no final answer when last seen with token seen. It
// returns the new fencing token, or ok=false when someone else got there
// first (or the original finished): exactly one of any number of concurrent
// takers wins.
func TakeOver(ctx context.Context, q Querier, id, seen int64, now time.Time, lease time.Duration) (token int64, ok bool, err error) {
	err = q.QueryRow(ctx, `
		UPDATE idempotency_keys
		SET fencing_token = fencing_token + 1, lease_expires_at = $3
		WHERE id = $1 AND fencing_token = $2
		  AND response_status IS NULL AND completed_at IS NULL
		  AND (lease_expires_at IS NULL OR lease_expires_at <= $4)
		RETURNING fencing_token`,
		id, seen, now.Add(lease), now).Scan(&token)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("take over idempotency key: %w", err)
	}
	return token, true, nil
}

// queueFinish adds to b the statement that stores resp as the key's final
// answer, ends the lease and the need for recovery, provided token is still
// the key's fencing token; otherwise the batch fails with ErrFenced.
func queueFinish(b *pgx.Batch, id, token int64, resp Response, now time.Time) {
	headers := jsontext.AppendStringMap(make([]byte, 0, 128), resp.Headers)
	b.Queue(finishSQL, id, token, resp.Status, headers, resp.Body, now)
}

// finishSQL is queueFinish's statement: the answer stored and the lease
// ended, provided the key is still the writer's (else the statement
// refuses, with the batch it is in), and the requests waiting for the key,
// on any instance, told (notifyingWaiters).
//
// Beside it rides the same statement over input rows (package rowset), so
// that the final answers of several requests' like batches may be stored
// by one (package groupcommit); each row is fenced on its own.
var finishSQL = rowset.Paired(`
		WITH changed AS (
		    UPDATE idempotency_keys
		    SET response_status = $3, response_headers = $4, response_body = $5, completed_at = $6,
		        lease_expires_at = NULL, recovery_next_at = NULL
		    WHERE id = $1 AND fencing_token = $2 AND response_status IS NULL
		    RETURNING id, waiters
		), woken AS (SELECT pg_notify('`+NotifyChannel+`', id::text) FROM changed WHERE waiters > 0)
		SELECT (SELECT count(*) FROM woken)::int, `+fencedUnless("EXISTS (SELECT FROM changed)"),
	rowset.New([]rowset.Column{
		{Name: "id", Type: "bigint"}, {Name: "fencing_token", Type: "bigint"}, {Name: "response_status", Type: "integer"},
		{Name: "response_headers", Type: "jsonb"}, {Name: "response_body", Type: "bytea"}, {Name: "completed_at", Type: "timestamptz"},
	}, `, changed AS (
		    UPDATE idempotency_keys k
		    SET response_status = input.response_status, response_headers = input.response_headers,
		        response_body = input.response_body, completed_at = input.completed_at,
		        lease_expires_at = NULL, recovery_next_at = NULL
		    FROM input
		    WHERE k.id = input.id AND k.fencing_token = input.fencing_token AND k.response_status IS NULL
		    RETURNING input.ord, k.id, k.waiters
		), woken AS (SELECT pg_notify('`+NotifyChannel+`', id::text) FROM changed WHERE waiters > 0)
		SELECT input.ord, (SELECT count(*) FROM woken)::int, `+fencedUnless("EXISTS (SELECT FROM changed WHERE changed.ord = input.ord)")+`
		FROM input ORDER BY input.ord`))

// hold is one hold or release of a key by its owner.
type hold struct {
	// until is when the lease runs out; nil: released, anyone may take the
	// key over (waiters are told).
	until *time.Time
	// look books the reconciler's next look at the key (see Look).
	look Look
	// lookupOnly: the owner may only look; it never books a look later
	// than the one booked, nor clears it, nor restarts the count.
	lookupOnly bool
	now        time.Time
}

// queueHold adds to b the statement by which an owner holds or releases its
// key (see hold). Fenced like every owner write.
func queueHold(b *pgx.Batch, id, token int64, h hold) {
	sql := `
		UPDATE idempotency_keys
		SET lease_expires_at = @until,
		    recovery_next_at = CASE @look::text
		        WHEN 'at' THEN CASE WHEN @lookup_only THEN LEAST(recovery_next_at, @at) ELSE @at END
		        WHEN 'by' THEN LEAST(recovery_next_at, @at)
		        WHEN 'never' THEN CASE WHEN @lookup_only THEN recovery_next_at END
		        ELSE COALESCE(recovery_next_at, @now)
		    END,
		    recovery_attempts = CASE WHEN @look IN ('at', 'never') AND NOT @lookup_only THEN 0 ELSE recovery_attempts END
		WHERE id = @id AND fencing_token = @token AND response_status IS NULL`
	kind := h.look.kind
	if kind == "" {
		kind = lookSoon
	}
	args := pgx.NamedArgs{"id": id, "token": token, "until": h.until, "look": string(kind), "at": h.look.at,
		"lookup_only": h.lookupOnly, "now": h.now}
	if h.until != nil {
		b.Queue(`WITH changed AS (`+sql+` RETURNING id) SELECT `+fencedUnless("EXISTS (SELECT FROM changed)"), args)
		return
	}
	// Released: a waiter may take the key over now.
	args["channel"] = NotifyChannel
	b.Queue(notifyingWaiters(sql+` RETURNING id, waiters`, "@channel", true), args)
}

// letGo ends the lease of key row id held with token, and nothing else: an
// owner whose work failed half-way hands the key back. Fenced: a newer
// owner keeps its lease, and the owner is told (ErrFenced).
func letGo(ctx context.Context, q Querier, id, token int64) error {
	var n, woken int
	err := q.QueryRow(ctx, notifyingWaiters(`
		UPDATE idempotency_keys SET lease_expires_at = NULL
		WHERE id = @id AND fencing_token = @token AND response_status IS NULL
		RETURNING id, waiters`, "@channel", false), pgx.NamedArgs{"id": id, "token": token, "channel": NotifyChannel}).Scan(&n, &woken)
	if err != nil {
		return fmt.Errorf("let go of idempotency key: %w", err)
	}
	if n == 0 {
		return ErrFenced
	}
	return nil
}

// notifyingWaiters wraps update, an UPDATE of one key row ... RETURNING id,
// waiters, run with the channel's name as an argument whose placeholder is
// channel (@channel, $7), so that the same statement tells waiting
// requests, on every instance, that the key changed, but only if some
// request waits for it (PostgreSQL delivers the notification only if the
// transaction commits). It answers
// (rows updated, notified). With fence, a statement that updated no row
// (the key is no longer the writer's) refuses with refuse.Fenced, undoing
// its batch.
func notifyingWaiters(update, channel string, fence bool) string {
	check := ""
	if fence {
		check = ", " + fencedUnless("EXISTS (SELECT FROM changed)")
	}
	return `WITH changed AS (` + update + `),
		woken AS (SELECT pg_notify(` + channel + `, id::text) FROM changed WHERE waiters > 0)
		SELECT (SELECT count(*) FROM changed)::int, (SELECT count(*) FROM woken)::int` + check
}

// fencedUnless is the guard of an owner's write: 0 if cond holds (the
// write found the key still the writer's), else refuse.Fenced.
func fencedUnless(cond string) string {
	return refuse.Unless(cond, refuse.Fenced, "'idempotency key taken over by another owner'", "")
}

// addWaiter counts (delta 1) or uncounts (delta -1) a request waiting for
// key row id.
func addWaiter(ctx context.Context, q Querier, id int64, delta int) error {
	_, err := q.Exec(ctx, `UPDATE idempotency_keys SET waiters = GREATEST(waiters + $2, 0) WHERE id = $1`, id, delta)
	if err != nil {
		return fmt.Errorf("count a waiter: %w", err)
	}
	return nil
}

func fenced(tag pgconn.CommandTag) error {
	if tag.RowsAffected() != 1 {
		return ErrFenced
	}
	return nil
}

// claimDue takes over the key most overdue for recovery among operations,
// skipping rows another reconciler or a request holds at this moment. In the
// same statement it books the attempt and schedules the next one (the
// schedule's waits, in microseconds, by attempt), so an attempt that dies
// half-way is still counted and spaced.
func claimDue(ctx context.Context, q Querier, operations []string, now time.Time, lease time.Duration, schedule []int64) (Record, int, bool, error) {
	var (
		r        Record
		attempts int
	)
	err := q.QueryRow(ctx, `
		WITH due AS (
		    SELECT id FROM idempotency_keys
		    WHERE recovery_next_at <= $1 AND manual_review_at IS NULL
		      AND response_status IS NULL
		      AND (lease_expires_at IS NULL OR lease_expires_at <= $1)
		      AND operation = ANY($3)
		    ORDER BY recovery_next_at, id
		    LIMIT 1
		    FOR UPDATE SKIP LOCKED
		)
		UPDATE idempotency_keys k
		SET fencing_token = k.fencing_token + 1, lease_expires_at = $2,
		    recovery_attempts = k.recovery_attempts + 1,
		    recovery_next_at = $1 + ($4::bigint[])[LEAST(k.recovery_attempts + 1, cardinality($4::bigint[]))]
		                            * interval '1 microsecond'
		FROM due WHERE k.id = due.id
		RETURNING k.id, k.tenant_id, k.operation, k.idempotency_key, k.resource_type, k.resource_id,
		          k.fencing_token, k.recovery_attempts`,
		now, now.Add(lease), operations, schedule,
	).Scan(&r.ID, &r.Scope.Tenant, &r.Scope.Operation, &r.Scope.Key, &r.Resource.Type, &r.Resource.ID,
		&r.FencingToken, &attempts)
	if errors.Is(err, pgx.ErrNoRows) {
		return Record{}, 0, false, nil
	}
	if err != nil {
		return Record{}, 0, false, fmt.Errorf("claim key for recovery: %w", err)
	}
	return r, attempts, true, nil
}

// markForReview records that the reconciler gave up on key row id: it stays
// without a final answer, for a person to resolve; the lease is released.
func markForReview(ctx context.Context, q Querier, id, token int64, now time.Time, reason string) error {
	tag, err := q.Exec(ctx, `
		UPDATE idempotency_keys
		SET manual_review_at = $3, recovery_last_error = $4, lease_expires_at = NULL
		WHERE id = $1 AND fencing_token = $2 AND response_status IS NULL`,
		id, token, now, reason)
	if err != nil {
		return fmt.Errorf("mark key for manual review: %w", err)
	}
	return fenced(tag)
}
