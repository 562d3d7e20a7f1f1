package idempotency

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/paymentsapi/paymentsapi/internal/refuse"
	"github.com/paymentsapi/paymentsapi/internal/statemachine"
)

// Owner is a key held by the caller: its row, its fencing token, and the
// resource it stands for. Every write an operation makes about that
// resource goes into a batch with one of the Owner's statements, committed
// by Commit, so it happens only while the caller still owns the key.
type Owner struct {
	e        *Engine
	op       Operation // whose Resume runs as this owner
	KeyID    int64
	Token    int64
	Tenant   string
	Resource Resource
	// First: this owner claimed the key (not a takeover, not the reconciler).
	First bool
	// Created is, for the First owner, the resource as the claim wrote it
	// (Request.Created); nil otherwise.
	Created Result
	// Recovering: the reconciler took the key over (or ResolveNow did).
	Recovering bool
	// LookupOnly: the owner may look at what became of the resource
	// elsewhere, and settle what it finds, but never act on the resource's
	// behalf (Reconciler.ResolveNow, prompted from outside). What a look
	// cannot settle is left to the reconciler; its looks never postpone the
	// reconciler's (see Look).
	LookupOnly bool

	pending      *Response // rendered by QueueFinish, stored if Commit succeeds
	pendingOut   string    // the outcome of the result pending is the answer of
	answer       *Response // the final answer this owner committed
	releasing    *Look     // the look the release in the batch being committed books; nil: no release in it
	released     *Look     // the look the last committed release booked
	ended        bool      // the last commit finished or released the key
	rescheduling bool      // a decided look (LookAt, LookNever) is in the batch being committed
	rescheduled  bool      // a committed hold or release booked a decided look
	markedReview bool
	// resolution is a person's decision the owner settles (ResolveAs);
	// resolutionTaken: the operation read it.
	resolution      *Resolution
	resolutionTaken bool
	operation       string // the key's scope's, for the log of a refused write
	order           uint64 // lockOrder of the key's scope: its place in a group commit
}

// QueueFinish adds to b the statement that stores r, rendered, as the key's
// final answer and ends the lease. It commits with the final state change
// queued beside it, or not at all.
func (o *Owner) QueueFinish(b *pgx.Batch, r Result) error {
	resp, err := o.op.Render(r)
	if err != nil {
		return fmt.Errorf("render %s result: %w", o.Resource.Type, err)
	}
	queueFinish(b, o.KeyID, o.Token, resp, o.e.clock.Now())
	o.pending, o.pendingOut = &resp, r.Outcome()
	return nil
}

// Look says when the reconciler next looks at a key nobody finished: the
// one schedule of every key, booked by its owner with each hold or release.
// The zero value is LookSoon.
//
// Whatever the Look, an owner that may only look up (LookupOnly) never
// moves a booked look later, never clears it, and never restarts the count
// of attempts: it was prompted from outside, and the schedule it found was
// booked by an owner that knew more of the key's history than one look.
type Look struct {
	kind lookKind
	at   time.Time
}

type lookKind string

const (
	lookSoon  lookKind = "soon"
	lookAt    lookKind = "at"
	lookBy    lookKind = "by"
	lookNever lookKind = "never"
)

// LookSoon: the resource's outcome is not known; the reconciler looks as
// soon as its backoff allows. A look already booked is kept (the
// reconciler books each attempt's successor when it claims the key), and
// the attempt counts towards RecoveryPolicy.MaxAttempts.
func LookSoon() Look { return Look{kind: lookSoon} }

// LookAt: the operation decided, from what it knows for certain, when the
// key must be looked at next: at t. It replaces what was booked, and the
// count of the reconciler's attempts starts again: a decided look is a
// resolved pass, not a failed one.
func LookAt(t time.Time) Look { return Look{kind: lookAt, at: t} }

// LookBy: the key must be looked at no later than t (kept if booked
// earlier), should its owner die: for a step whose outcome only a look can
// tell. The count of attempts goes on.
func LookBy(t time.Time) Look { return Look{kind: lookBy, at: t} }

// LookNever: the operation decided that nothing the reconciler could do
// would change the key's resource; it waits for its client. Like LookAt, a
// resolved pass.
func LookNever() Look { return Look{kind: lookNever} }

// decided reports whether the operation chose the look (LookAt,
// LookNever) rather than leaving it to the reconciler's backoff.
func (l Look) decided() bool { return l.kind == lookAt || l.kind == lookNever }

// claimAt is when a claim made at now that books l first looks at its
// key: nil for none.
func (l Look) claimAt(now time.Time) *time.Time {
	switch l.kind {
	case lookAt, lookBy:
		return &l.at
	case lookSoon:
		return &now
	default:
		return nil
	}
}

// QueueHold adds to b the renewal of the caller's lease, for one more step
// that may take up to an outside call (renewed before each call, so that a
// look followed by an action never outlives it), and books look.
func (o *Owner) QueueHold(b *pgx.Batch, look Look) {
	now := o.e.clock.Now()
	until := now.Add(o.e.cfg.Lease)
	o.queueHold(b, hold{until: &until, look: look, now: now})
}

// QueueRelease adds to b the end of the caller's lease without a final
// answer, so that the next retry may take the key over at once, and books
// look.
func (o *Owner) QueueRelease(b *pgx.Batch, look Look) {
	o.queueHold(b, hold{look: look, now: o.e.clock.Now()})
	o.releasing = &look
}

func (o *Owner) queueHold(b *pgx.Batch, h hold) {
	h.lookupOnly = o.LookupOnly
	queueHold(b, o.KeyID, o.Token, h)
	if h.look.decided() && !h.lookupOnly {
		o.rescheduling = true
	}
}

// letGoAfter hands the key back after the owner's work failed with err,
// unless it already ended its lease or err stands for a crash (ErrCrashed)
// or a lost key (ErrFenced). Best effort: if it fails, the lease runs out.
func (o *Owner) letGoAfter(ctx context.Context, err error) {
	if err == nil || o.ended || errors.Is(err, ErrCrashed) || errors.Is(err, ErrFenced) {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stepTimeout)
	defer cancel()
	switch letErr := letGo(ctx, o.e.db, o.KeyID, o.Token); {
	case errors.Is(letErr, ErrFenced):
		o.refused(ctx, "hand the key back after a failure", letErr)
	case letErr != nil:
		o.e.log.WarnContext(ctx, "could not hand back a key after a failure; its lease will run out",
			"resource", o.Resource.ID, "error", letErr)
	}
}

// MarkForReview records that a person must resolve the key's resource (no
// answer the operation can get would decide it): the reconciler stops
// looking at it, and the manual-review gauges count it. Fenced.
func (o *Owner) MarkForReview(ctx context.Context, reason string) error {
	if err := o.markReview(ctx, reason); err != nil {
		return err
	}
	o.markedReview = true
	o.e.log.WarnContext(ctx, "key marked for manual review", "resource", o.Resource.ID, "reason", reason)
	return nil
}

// markReview is the write of MarkForReview, and of the reconciler that
// gives up on a key: fenced, its refusal logged (refused).
func (o *Owner) markReview(ctx context.Context, reason string) error {
	err := markForReview(ctx, o.e.db, o.KeyID, o.Token, o.e.clock.Now(), reason)
	if errors.Is(err, ErrFenced) {
		o.refused(ctx, "mark the key for manual review", err)
	}
	return err
}

// refused logs a write of this owner that the database refused: the key
// is no longer the owner's (another took it over, with a newer fencing
// token), or the resource moved since the owner read it. It is the one
// log line of each refused write, whichever path made it (Commit, the
// hand-back after a failure, a mark for review), at warn: a request, a
// retry or the reconciler lost a race that the fencing made harmless, and
// an operator who sees many wants to know which instance was cut off, and
// from what. step says what the write would have done. The key is named
// by its row, tenant and operation, never by the client's own key text.
func (o *Owner) refused(ctx context.Context, step string, err error) {
	msg := "write refused: another owner took the key over"
	if statemachine.IsStaleWrite(err) {
		msg = "write refused: the resource moved since its owner read it"
	}
	o.e.log.WarnContext(ctx, msg, "key_id", o.KeyID, "tenant", o.Tenant, "operation", o.operation,
		"resource", o.Resource.ID, "fencing_token", o.Token, "refused", step, "error", err)
}

// stepTimeout bounds one transaction of an operation's progress. It is
// well below any sane lease, so an owner stuck on a silent database gives
// up before its key can be taken over.
const stepTimeout = 10 * time.Second

// Commit runs b as one transaction, in one round trip: a batch with no
// BEGIN and no COMMIT is one implicit transaction. If another owner took the
// key over, or moved the resource, a statement of b refuses (the fenced key
// write, or the guarded move: the checks are made in the database, see
// package refuse), Commit fails with an error wrapping ErrFenced, and
// nothing of b is written; the engine then answers from what the key says.
func (o *Owner) Commit(ctx context.Context, b *pgx.Batch) error {
	ctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	pending, rescheduling := o.pending, o.rescheduling
	o.pending, o.rescheduling = nil, false
	releasing := o.releasing
	o.releasing = nil
	err := o.e.commits.commit(ctx, o.order, b)
	if lost := fencedOut(err); lost != nil {
		o.refused(ctx, commitStep(pending, o.pendingOut, releasing), lost)
		return lost
	}
	if err != nil {
		return err
	}
	o.ended = pending != nil || releasing != nil
	if releasing != nil {
		o.released = releasing
	}
	o.rescheduled = o.rescheduled || rescheduling
	if pending != nil {
		o.answer = pending
		// Counted once per key: only the owner whose commit stored the
		// final answer gets here.
		o.e.metrics.OperationResults.WithLabelValues(o.op.Name(), o.pendingOut).Inc()
	}
	return nil
}

// fencedOut is err, the error of an owner's batch, as an error wrapping
// ErrFenced if a statement of the batch refused it because the key or the
// resource is no longer the owner's to write (package refuse); else nil.
func fencedOut(err error) error {
	if _, fenced := refuse.Is(err, refuse.Fenced); fenced {
		return fmt.Errorf("%w: %w", ErrFenced, err)
	}
	if statemachine.IsStaleWrite(err) {
		return fmt.Errorf("%w: %w: %w", ErrFenced, statemachine.ErrStaleWrite, err)
	}
	return nil
}

// commitStep says what a batch an owner commits would have done, by the
// owner's statement in it: store the answer (of outcome, if pending), end
// the lease (releasing), or else renew it.
func commitStep(pending *Response, outcome string, releasing *Look) string {
	switch {
	case pending != nil:
		return "store the answer (" + outcome + ")"
	case releasing != nil:
		return "release the key"
	}
	return "renew the lease"
}

// comeBack is how long after now a client told "not known yet" should ask
// again: when the look the owner's release booked is due, if it decided one
// (LookAt: nothing can be known before it), else at once (0: the engine's
// RetryAfter applies).
func (o *Owner) comeBack(now time.Time) time.Duration {
	if o.released == nil || o.released.kind != lookAt {
		return 0
	}
	return o.released.at.Sub(now)
}

// Finished reports whether this owner committed the key's final answer.
func (o *Owner) Finished() bool { return o.answer != nil }
