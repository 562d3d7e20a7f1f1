package idempotency

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/paymentsapi/paymentsapi/internal/audit"
)

// The outcomes a person may give a key left for manual review.
const (
	ResolvedSucceeded = "succeeded"
	ResolvedDeclined  = "declined"
)

// AuditResolved is the audit log's action for a person's resolution of a
// key (package audit).
const AuditResolved = "idempotency_key.resolved"

// Resolution is a person's decision on a key the reconciler left for
// manual review: its resource succeeded or was declined, and why they say
// so.
type Resolution struct {
	Outcome string // ResolvedSucceeded or ResolvedDeclined
	Reason  string // required: the audit log keeps it
}

// The errors of ResolveAs before anything is asked or written.
var (
	ErrNotInReview   = errors.New("the key is not left for manual review")
	ErrBadResolution = errors.New("a resolution is succeeded or declined, with a reason")
	ErrNotResolvable = errors.New("the operation cannot take a person's resolution")
	errNoResolution  = errors.New("the owner carries no resolution")
)

// ContradictedError refuses a resolution that the provider's answer
// contradicts (it charged, and the person says declined; or the reverse),
// or that the provider cannot yet confirm or deny (it is still processing,
// it could not be asked, or its "not found" may still lag). Nothing was
// written; the key stays in review.
type ContradictedError struct {
	Outcome  string // what the person decided
	Provider string // what the provider said
}

func (e *ContradictedError) Error() string {
	return fmt.Sprintf("refused: resolving it as %s contradicts the provider, which %s", e.Outcome, e.Provider)
}

// Resolution returns the person's resolution this owner carries, if any
// (ResolveAs): the operation's flow then settles the resource as the
// person decided, where the provider does not contradict it, instead of
// recovering it.
func (o *Owner) Resolution() (Resolution, bool) {
	if o.resolution == nil {
		return Resolution{}, false
	}
	o.resolutionTaken = true
	return *o.resolution, true
}

// QueueResolved adds to b the audit log's record of the owner's
// resolution, with what the provider said: it commits with the resource's
// move and the key's final answer, or not at all. The actor is the
// context's (the operator).
func (o *Owner) QueueResolved(ctx context.Context, b *pgx.Batch, provider string) error {
	if o.resolution == nil {
		return errNoResolution
	}
	return audit.Queue(ctx, b, o.e.clock.Now(), audit.Change{
		Action: AuditResolved, TenantID: o.Tenant, TargetID: o.Resource.ID,
		Details: map[string]any{
			"operation": o.operation, "resourceType": o.Resource.Type, "outcome": o.resolution.Outcome,
			"reason": o.resolution.Reason, "provider": provider,
		},
	})
}

// ResolveAs settles the resource of a key left for manual review as a
// person decided (r), through the key's own operation (opFor names it, as
// for ResolveNow): it takes the key over with a new fencing token, like
// the reconciler, and the operation asks the provider first. Where the
// provider's answer contradicts the decision, or cannot confirm or deny
// it yet, it is refused (*ContradictedError) and the key stays as it was;
// where the provider knows nothing of it, the person's decision stands.
// The resolution is recorded in the audit log (AuditResolved, the
// context's actor) in the transaction of the resource's move.
//
// A key with a final answer is OutcomeFinal (resolved before: sending the
// same resolution again changes nothing), one a live owner holds
// OutcomeInFlight; a key not in review is ErrNotInReview.
func (e *Engine) ResolveAs(ctx context.Context, res Resource, r Resolution, opFor func(operation string) Operation) (string, error) {
	r.Reason = strings.TrimSpace(r.Reason)
	if (r.Outcome != ResolvedSucceeded && r.Outcome != ResolvedDeclined) || r.Reason == "" {
		return "", ErrBadResolution
	}
	rec, err := LoadByResource(ctx, e.db, res)
	if err != nil {
		return "", err
	}
	switch {
	case rec.Response != nil || rec.CompletedAt != nil:
		return OutcomeFinal, nil
	case rec.ManualReviewAt == nil:
		return "", ErrNotInReview
	}
	op := opFor(rec.Scope.Operation)
	if op == nil {
		return "", fmt.Errorf("resolve %s %s: operation %q is not the caller's", res.Type, res.ID, rec.Scope.Operation)
	}
	own, ok, err := e.takeOverKey(ctx, rec, e.clock.Now())
	if err != nil {
		return "", err
	}
	if !ok {
		return OutcomeInFlight, nil
	}
	e.log.InfoContext(ctx, "idempotency key taken over to settle it as a person decided", "resource", res.ID,
		"outcome", r.Outcome, "fencing_token", own.Token)
	own.LookupOnly = true
	own.resolution = &r
	outcome, err := resolve(ctx, op, own)
	switch {
	case err != nil:
		return OutcomeUnresolved, err
	case !own.resolutionTaken:
		return OutcomeUnresolved, fmt.Errorf("%w: %s", ErrNotResolvable, rec.Scope.Operation)
	}
	return outcome, nil
}

// ResolveAs is Engine.ResolveAs for the reconciler's operations.
func (r *Reconciler) ResolveAs(ctx context.Context, res Resource, decided Resolution) (string, error) {
	return r.e.ResolveAs(ctx, res, decided, func(operation string) Operation { return r.ops[operation] })
}

// Stuck is a key without a final answer that a person may have to look
// at: left for manual review, or unfinished for long.
type Stuck struct {
	Scope          Scope
	Resource       Resource
	CreatedAt      time.Time
	ManualReviewAt *time.Time // nil: not in review, only old
	Attempts       int        // the reconciler's unresolved attempts
	LastError      string     // why the last attempt did not resolve it, or why it is in review
	NextLookAt     *time.Time // when the reconciler looks next (nil: it does not)
}

// Stuck lists, oldest first, at most limit keys without a final answer
// that are left for manual review, or that the reconciler still looks at
// and were created before `before`. It reads the partial index of
// unfinished keys only: it is for an operator's page, never a request's.
func (e *Engine) Stuck(ctx context.Context, before time.Time, limit int) ([]Stuck, error) {
	rows, err := e.db.Query(ctx, `
		SELECT tenant_id, operation, idempotency_key, resource_type, resource_id, created_at, manual_review_at,
		       recovery_attempts, coalesce(recovery_last_error, ''), recovery_next_at
		FROM idempotency_keys
		WHERE response_status IS NULL
		  AND (manual_review_at IS NOT NULL OR (created_at < $1 AND recovery_next_at IS NOT NULL))
		ORDER BY created_at, id LIMIT $2`, before, limit)
	if err != nil {
		return nil, fmt.Errorf("list stuck idempotency keys: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Stuck, error) {
		var s Stuck
		err := row.Scan(&s.Scope.Tenant, &s.Scope.Operation, &s.Scope.Key, &s.Resource.Type, &s.Resource.ID,
			&s.CreatedAt, &s.ManualReviewAt, &s.Attempts, &s.LastError, &s.NextLookAt)
		s.CreatedAt = s.CreatedAt.UTC()
		return s, err
	})
	if err != nil {
		return nil, fmt.Errorf("list stuck idempotency keys: %w", err)
	}
	return out, nil
}
