package payments

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/paymentsapi/paymentsapi/internal/idempotency"
)

// RecoveryPolicy spaces and bounds the reconciler's attempts on one payment.
type RecoveryPolicy struct {
	// Backoff is the wait after the first unresolved attempt; it doubles
	// with each attempt, up to MaxBackoff, with jitter.
	Backoff    time.Duration
	MaxBackoff time.Duration
	// MaxAttempts is how many unresolved attempts the reconciler makes
	// before it marks the payment for manual review and stops.
	MaxAttempts int
}

func (p RecoveryPolicy) withDefaults() RecoveryPolicy {
	if p.Backoff <= 0 {
		p.Backoff = 5 * time.Second
	}
	if p.MaxBackoff <= 0 {
		p.MaxBackoff = 10 * time.Minute
	}
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = 20
	}
	return p
}

// Reconciliation outcomes, as counted in the reconciler metric.
const (
	OutcomeSucceeded    = "succeeded"
	OutcomeDeclined     = "declined"
	OutcomeRetryable    = "failed_retryable"
	OutcomeUnresolved   = "unresolved"
	OutcomeManualReview = "manual_review"
	OutcomeError        = "error"
)

// ReconcileStats counts what one pass did, by outcome.
type ReconcileStats map[string]int

// ReconcileOnce resolves the payments that are due, one at a time, until
// none is due or limit were handled. A payment is due when its outcome may
// have moved money (PROVIDER_REQUEST_SENT or UNKNOWN_REQUIRES_RECOVERY), no
// request owns its key, and its backoff has passed. The reconciler takes the
// key over like a retry would (a new fencing token) and asks the provider by
// the derived key; it sends the charge only if the provider is certain it
// never saw the key and still remembers keys as old as the payment. It never
// deletes and never guesses: after RecoveryPolicy.MaxAttempts it marks the
// payment for manual review, and the payment stays PROCESSING.
func (s *Service) ReconcileOnce(ctx context.Context, limit int) (ReconcileStats, error) {
	stats := ReconcileStats{}
	for range limit {
		p, token, attempt, ok, err := s.claimForRecovery(ctx)
		if err != nil {
			return stats, err
		}
		if !ok {
			break
		}
		outcome := s.recoverOne(ctx, p, token, attempt)
		stats[outcome]++
		s.metrics.ReconcilerOutcomes.WithLabelValues(outcome).Inc()
	}
	return stats, nil
}

// RunReconciler runs ReconcileOnce every interval until ctx ends.
func (s *Service) RunReconciler(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		stats, err := s.ReconcileOnce(ctx, 100)
		if err != nil && ctx.Err() == nil {
			s.log.ErrorContext(ctx, "reconciler pass failed", "error", err)
		} else if len(stats) > 0 {
			s.log.InfoContext(ctx, "reconciler pass", "outcomes", map[string]int(stats))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// claimForRecovery takes over the key of the most overdue payment,
// skipping rows another reconciler or a request holds at this moment. In the
// same statement it books the attempt and schedules the next one
// (exponential backoff from RecoveryPolicy, capped, jittered into [d/2, d)),
// so an attempt that dies half-way is still counted and spaced.
func (s *Service) claimForRecovery(ctx context.Context) (Payment, int64, int, bool, error) {
	now := s.clock.Now()
	var (
		id, tenant string
		token      int64
		attempts   int
	)
	err := s.db.QueryRow(ctx, `
		WITH due AS (
		    SELECT p.id
		    FROM payments p
		    JOIN idempotency_keys k ON k.payment_id = p.id
		    WHERE p.state IN ('PROVIDER_REQUEST_SENT', 'UNKNOWN_REQUIRES_RECOVERY')
		      AND p.manual_review_at IS NULL
		      AND p.recovery_next_at <= $1
		      AND k.response_status IS NULL
		      AND (k.lease_expires_at IS NULL OR k.lease_expires_at <= $1)
		    ORDER BY p.recovery_next_at, p.id
		    LIMIT 1
		    FOR UPDATE OF k, p SKIP LOCKED
		), booked AS (
		    UPDATE payments p
		    SET recovery_attempts = p.recovery_attempts + 1,
		        recovery_next_at = $1 + LEAST($3 * power(2, LEAST(p.recovery_attempts, 30)), $4)
		                              * (0.5 + random() / 2) * interval '1 microsecond'
		    FROM due WHERE p.id = due.id
		    RETURNING p.id, p.tenant_id, p.recovery_attempts
		)
		UPDATE idempotency_keys k
		SET fencing_token = k.fencing_token + 1, lease_expires_at = $2
		FROM booked WHERE k.payment_id = booked.id
		RETURNING k.payment_id, booked.tenant_id, k.fencing_token, booked.recovery_attempts`,
		now, now.Add(s.cfg.Lease), s.cfg.Recovery.Backoff.Microseconds(), s.cfg.Recovery.MaxBackoff.Microseconds(),
	).Scan(&id, &tenant, &token, &attempts)
	if errors.Is(err, pgx.ErrNoRows) {
		return Payment{}, 0, 0, false, nil
	}
	if err != nil {
		return Payment{}, 0, 0, false, fmt.Errorf("claim payment for recovery: %w", err)
	}
	p, err := getPayment(ctx, s.db, tenant, id)
	if err != nil {
		return Payment{}, 0, 0, false, err
	}
	return p, token, attempts, true, nil
}

// recoverOne resumes p as a takeover would. After the last allowed attempt
// an unresolved payment is marked for manual review.
func (s *Service) recoverOne(ctx context.Context, p Payment, token int64, attempt int) string {
	log := s.log.With("payment_id", p.ID, "tenant", p.TenantID, "attempt", attempt)
	if p.State != StateProviderRequestSent && p.State != StateUnknown {
		// Moved on between the claim's snapshot and now: not ours to resume.
		b := &pgx.Batch{}
		idempotency.QueueRelease(b, p.ID, token)
		if err := s.sendBatch(ctx, b); err != nil {
			log.WarnContext(ctx, "reconciler could not release a key", "error", err)
		}
		return OutcomeUnresolved
	}
	res, err := s.process(ctx, p, token)
	switch {
	case err == nil && res.Response.Status == http.StatusCreated:
		log.InfoContext(ctx, "reconciler resolved payment", "outcome", OutcomeSucceeded)
		return OutcomeSucceeded
	case err == nil && res.Response.Status == http.StatusPaymentRequired:
		log.InfoContext(ctx, "reconciler resolved payment", "outcome", OutcomeDeclined)
		return OutcomeDeclined
	case errors.Is(err, ErrProviderUnavailable):
		return OutcomeRetryable
	}
	reason := "provider could not say"
	if err != nil {
		reason = err.Error()
	}
	if attempt < s.cfg.Recovery.MaxAttempts {
		if err != nil {
			log.WarnContext(ctx, "reconciler attempt failed", "error", err)
			return OutcomeError
		}
		return OutcomeUnresolved
	}
	_, markErr := s.db.Exec(ctx, `
		UPDATE payments SET manual_review_at = $2, recovery_last_error = $3
		WHERE id = $1 AND state IN ('PROVIDER_REQUEST_SENT', 'UNKNOWN_REQUIRES_RECOVERY')`,
		p.ID, s.clock.Now(), reason)
	if markErr != nil {
		log.ErrorContext(ctx, "reconciler could not mark payment for manual review", "error", markErr)
		return OutcomeError
	}
	log.WarnContext(ctx, "payment marked for manual review: the reconciler gave up; it stays PROCESSING", "reason", reason)
	return OutcomeManualReview
}
