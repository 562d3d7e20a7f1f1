package idempotency

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/paymentsapi/paymentsapi/internal/actor"
	"github.com/paymentsapi/paymentsapi/internal/backoff"
)

// RecoveryPolicy spaces and bounds the reconciler's attempts on one key.
type RecoveryPolicy struct {
	// Backoff spaces the attempts on one key (defaults: 5 s doubling to
	// 10 min), jittered.
	Backoff backoff.Policy
	// MaxAttempts is how many unresolved attempts the reconciler makes
	// before it marks the key for manual review and stops (default 20).
	MaxAttempts int
}

func (p RecoveryPolicy) withDefaults() RecoveryPolicy {
	if p.Backoff.Base <= 0 {
		p.Backoff.Base = 5 * time.Second
	}
	if p.Backoff.Max <= 0 {
		p.Backoff.Max = 10 * time.Minute
	}
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = 20
	}
	return p
}

// Reconciler outcomes that are not an operation's own (those come from
// Result.Outcome of a resolved key: succeeded, failed, ...).
const (
	// OutcomeRescheduled: the operation looked, found nothing to settle,
	// and decided itself when to look next, or never (LookAt, LookNever):
	// a resolved pass, which restarts the count of attempts.
	OutcomeRescheduled  = "rescheduled"
	OutcomeUnresolved   = "unresolved"
	OutcomeManualReview = "manual_review"
	OutcomeError        = "error"
)

// RecoveryStats counts what one pass did, by outcome.
type RecoveryStats map[string]int

// Reconciler is the one recovery loop of every operation. It claims keys
// that are due (nobody finished them, nobody holds them, and the look their
// owner booked has come: see Look) with FOR UPDATE SKIP LOCKED, takes each
// over like a retry would (a new fencing token), and asks its operation to
// resume it. The operation brings its own way of finding out what became
// of its resource; the reconciler never deletes and never guesses: after
// RecoveryPolicy.MaxAttempts unresolved attempts it marks the key for
// manual review and leaves it.
type Reconciler struct {
	e      *Engine
	policy RecoveryPolicy
	ops    map[string]Operation
	names  []string
}

// NewReconciler returns the reconciler of ops.
func NewReconciler(e *Engine, policy RecoveryPolicy, ops ...Operation) *Reconciler {
	r := &Reconciler{e: e, policy: policy.withDefaults(), ops: map[string]Operation{}}
	for _, op := range ops {
		for _, name := range names(op) { // a key stored under an alias is op's too
			r.ops[name] = op
			r.names = append(r.names, name)
		}
	}
	return r
}

// RunOnce resolves due keys, one at a time, until none is due or limit were
// handled.
func (r *Reconciler) RunOnce(ctx context.Context, limit int) (RecoveryStats, error) {
	stats := RecoveryStats{}
	schedule := r.schedule()
	for range limit {
		// stepTimeout bounds the claim as it bounds an owner's steps: a
		// frozen primary fails the pass, which is logged and run again,
		// instead of holding the reconciler forever.
		cctx, cancel := context.WithTimeout(ctx, stepTimeout)
		rec, attempt, ok, err := claimDue(cctx, r.e.db, r.names, r.e.clock.Now(), r.e.cfg.Lease, schedule)
		cancel()
		if err != nil {
			return stats, err
		}
		if !ok {
			break
		}
		outcome := r.recoverOne(ctx, rec, attempt)
		stats[outcome]++
		r.e.metrics.ReconcilerOutcomes.WithLabelValues(outcome).Inc()
	}
	return stats, nil
}

// schedule is the pass's backoff, by attempt, in microseconds.
func (r *Reconciler) schedule() []int64 {
	waits := r.policy.Backoff.Schedule(31)
	us := make([]int64, len(waits))
	for i, d := range waits {
		us[i] = d.Microseconds()
	}
	return us
}

// Run runs RunOnce every interval until ctx ends.
func (r *Reconciler) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		stats, err := r.RunOnce(ctx, 100)
		if err != nil && ctx.Err() == nil {
			r.e.log.ErrorContext(ctx, "reconciler pass failed", "error", err)
		} else if len(stats) > 0 {
			r.e.log.InfoContext(ctx, "reconciler pass", "outcomes", map[string]int(stats))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// recoverOne resumes the key's resource as a takeover would. After the last
// allowed attempt an unresolved key is marked for manual review.
//
// What it moves names the reconciler as its actor (the scheduler for a
// key the service scheduled itself, ServiceKey), under a request id of
// the key's own, unless ctx names an actor already: an operator who asked
// for the pass (`paymentsapi reconcile -once`).
func (r *Reconciler) recoverOne(ctx context.Context, rec Record, attempt int) (outcome string) {
	who := actor.Reconciler
	if IsServiceKey(rec.Scope.Key) {
		who = actor.Scheduler
	}
	ctx = actor.Ensure(ctx, who)
	log := r.e.log.With("operation", rec.Scope.Operation, "resource", rec.Resource.ID,
		"tenant", rec.Scope.Tenant, "attempt", attempt, "request_id", actor.From(ctx).RequestID)
	if r.e.tracer != nil {
		// A trace of its own per key: what the attempt asks the provider,
		// writes, and the events it writes (their publish and webhook
		// deliveries continue it) belong to it.
		var span trace.Span
		ctx, span = r.e.tracer.Start(ctx, "reconcile "+rec.Scope.Operation, trace.WithNewRoot(),
			trace.WithAttributes(attribute.String("paymentsapi.resource.id", rec.Resource.ID),
				attribute.String("paymentsapi.tenant.id", rec.Scope.Tenant), attribute.Int("paymentsapi.reconciler.attempt", attempt)))
		defer func() {
			span.SetAttributes(attribute.String("paymentsapi.reconciler.outcome", outcome))
			if outcome == OutcomeError || outcome == OutcomeManualReview {
				span.SetStatus(codes.Error, outcome)
			}
			span.End()
		}()
	}
	own := r.e.takenOver(rec)
	outcome, err := r.resolve(ctx, rec.Scope.Operation, own)
	switch outcome {
	case OutcomeManualReview:
		return outcome
	case OutcomeUnresolved:
	default:
		log.InfoContext(ctx, "reconciler resolved a key", "outcome", outcome)
		return outcome
	}
	reason := "the operation could not resolve it"
	if err != nil {
		reason = err.Error()
	}
	if attempt < r.policy.MaxAttempts {
		if err != nil {
			// A failed attempt is the reconciler's ordinary business (it
			// backs off and tries again): information, not a warning. The
			// error may be what a client was told (retry with the same
			// key), so it is logged as the attempt's cause.
			log.InfoContext(ctx, "reconciler attempt did not resolve the key; it will try again", "cause", err.Error(), "next_attempt", attempt+1)
			return OutcomeError
		}
		return OutcomeUnresolved
	}
	mctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	if err := own.markReview(mctx, reason); err != nil {
		if !errors.Is(err, ErrFenced) { // a refused write is logged where it is refused
			log.ErrorContext(ctx, "reconciler could not mark a key for manual review", "error", err)
		}
		return OutcomeError
	}
	log.WarnContext(ctx, "key marked for manual review: the reconciler gave up; its resource stays as it is", "reason", reason)
	return OutcomeManualReview
}

// resolve runs the operation of own's key, which the caller just took over,
// as the reconciler: a recovering owner, which never starts what nobody
// started (and with own.LookupOnly never acts at all). It answers the
// operation's outcome if the key was finished, OutcomeManualReview if the
// operation left it for a person, else OutcomeUnresolved with the
// operation's error, if any. operation is one of r.ops.
func (r *Reconciler) resolve(ctx context.Context, operation string, own *Owner) (string, error) {
	return resolve(ctx, r.ops[operation], own)
}

// resolve runs op as own, a recovering owner (see Reconciler.resolve).
func resolve(ctx context.Context, op Operation, own *Owner) (string, error) {
	own.Recovering = true
	own.op = op
	res, err := own.op.Resume(context.WithoutCancel(ctx), own)
	own.letGoAfter(ctx, err)
	switch {
	case own.markedReview:
		return OutcomeManualReview, nil
	case err == nil && own.Finished():
		return res.Outcome(), nil
	case err == nil && own.rescheduled:
		return OutcomeRescheduled, nil
	}
	return OutcomeUnresolved, err
}

// Outcomes of ResolveNow that leave the key as it was.
const (
	// OutcomeFinal: the key already has its final answer.
	OutcomeFinal = "final"
	// OutcomeInFlight: a live owner holds the key (a request, a takeover,
	// the reconciler) and resolves it.
	OutcomeInFlight = "in_flight"
)

// ResolveNow resolves the unfinished key that created res now, rather than
// when the reconciler's backoff says, in the one way the reconciler does:
// it takes the key over with a new fencing token (TakeOver) and resumes the
// resource as a recovering owner that may only look (LookupOnly): whatever
// prompted it, such as a webhook from outside, can make it settle only
// what it finds, never act.
// It is not one of the reconciler's attempts, and what it leaves
// unresolved stays on the reconciler's schedule.
//
// A key with a final answer (OutcomeFinal), one a live owner holds
// (OutcomeInFlight) and one left for a person (OutcomeManualReview) are
// left as they are. An unknown resource is ErrNotFound. The error of an
// attempt that failed (the database, an outside service) comes back
// with OutcomeUnresolved.
func (r *Reconciler) ResolveNow(ctx context.Context, res Resource) (string, error) {
	return r.e.ResolveNow(ctx, res, func(operation string) Operation { return r.ops[operation] })
}

// ResolveNow is Reconciler.ResolveNow for the operation that opFor names
// for the key's scope (nil: the key is none of its operations'): for an
// operation that asked another's resource to end by itself (a cancel of a
// payment that never moved money) and cannot wait for the reconciler.
func (e *Engine) ResolveNow(ctx context.Context, res Resource, opFor func(operation string) Operation) (string, error) {
	rec, err := LoadByResource(ctx, e.db, res)
	if err != nil {
		return "", err
	}
	switch {
	case rec.Response != nil || rec.CompletedAt != nil:
		return OutcomeFinal, nil
	case rec.ManualReviewAt != nil:
		return OutcomeManualReview, nil
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
		return OutcomeInFlight, nil // a live owner holds it, or moved first
	}
	e.log.InfoContext(ctx, "idempotency key taken over to resolve it now", "resource", res.ID, "fencing_token", own.Token)
	own.LookupOnly = true
	return resolve(ctx, op, own)
}
