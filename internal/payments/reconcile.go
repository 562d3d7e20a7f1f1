package payments

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
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

// delay is the wait after the n-th unresolved attempt (n >= 1): exponential,
// capped, and jittered into [d/2, d) so that payments that failed together
// do not retry together.
func (p RecoveryPolicy) delay(n int) time.Duration {
	d := p.MaxBackoff
	if shift := n - 1; shift < 30 && p.Backoff<<shift < p.MaxBackoff {
		d = p.Backoff << shift
	}
	return d/2 + rand.N(d/2+1)
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
		p, token, ok, err := s.claimForRecovery(ctx)
		if err != nil {
			return stats, err
		}
		if !ok {
			break
		}
		outcome := s.recoverOne(ctx, p, token)
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

// claimForRecovery takes over the key of the most overdue payment, skipping
// rows another reconciler is claiming at this moment.
func (s *Service) claimForRecovery(ctx context.Context) (Payment, int64, bool, error) {
	now := s.clock.Now()
	var (
		id, tenant string
		token      int64
	)
	err := s.db.QueryRow(ctx, `
		WITH due AS (
		    SELECT k.payment_id
		    FROM payments p
		    JOIN idempotency_keys k ON k.payment_id = p.id
		    WHERE p.state IN ('PROVIDER_REQUEST_SENT', 'UNKNOWN_REQUIRES_RECOVERY')
		      AND p.manual_review_at IS NULL
		      AND p.recovery_next_at <= $1
		      AND k.response_status IS NULL
		      AND (k.lease_expires_at IS NULL OR k.lease_expires_at <= $1)
		    ORDER BY p.recovery_next_at, p.id
		    LIMIT 1
		    FOR UPDATE OF k SKIP LOCKED
		)
		UPDATE idempotency_keys k
		SET fencing_token = k.fencing_token + 1, lease_expires_at = $2
		FROM due WHERE k.payment_id = due.payment_id
		RETURNING k.payment_id, k.tenant_id, k.fencing_token`,
		now, now.Add(s.cfg.Lease)).Scan(&id, &tenant, &token)
	if errors.Is(err, pgx.ErrNoRows) {
		return Payment{}, 0, false, nil
	}
	if err != nil {
		return Payment{}, 0, false, fmt.Errorf("claim payment for recovery: %w", err)
	}
	p, err := getPayment(ctx, s.db, tenant, id)
	if err != nil {
		return Payment{}, 0, false, err
	}
	return p, token, true, nil
}

// recoverOne resumes p as a takeover would and books the attempt.
func (s *Service) recoverOne(ctx context.Context, p Payment, token int64) string {
	log := s.log.With("payment_id", p.ID, "tenant", p.TenantID)
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
	manual, bookErr := s.bookUnresolved(ctx, p.ID, reason)
	if bookErr != nil {
		log.ErrorContext(ctx, "reconciler could not book attempt", "error", bookErr)
		return OutcomeError
	}
	if manual {
		log.WarnContext(ctx, "payment marked for manual review: the reconciler gave up; it stays PROCESSING", "reason", reason)
		return OutcomeManualReview
	}
	if err != nil {
		log.WarnContext(ctx, "reconciler attempt failed", "error", err)
		return OutcomeError
	}
	return OutcomeUnresolved
}

// bookUnresolved counts an attempt that did not resolve the payment, sets
// its next attempt, and marks it for manual review after the last one.
func (s *Service) bookUnresolved(ctx context.Context, id, reason string) (manual bool, err error) {
	var attempts int
	err = s.db.QueryRow(ctx, `SELECT recovery_attempts FROM payments WHERE id = $1`, id).Scan(&attempts)
	if err != nil {
		return false, fmt.Errorf("read recovery attempts: %w", err)
	}
	attempts++
	now := s.clock.Now()
	manual = attempts >= s.cfg.Recovery.MaxAttempts
	var reviewAt *time.Time
	if manual {
		reviewAt = &now
	}
	_, err = s.db.Exec(ctx, `
		UPDATE payments
		SET recovery_attempts = $2, recovery_next_at = $3, recovery_last_error = $4, manual_review_at = $5
		WHERE id = $1 AND state IN ('PROVIDER_REQUEST_SENT', 'UNKNOWN_REQUIRES_RECOVERY')`,
		id, attempts, now.Add(s.cfg.Recovery.delay(attempts)), reason, reviewAt)
	if err != nil {
		return false, fmt.Errorf("book recovery attempt: %w", err)
	}
	return manual, nil
}
