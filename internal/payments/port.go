package payments

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/paymentsapi/paymentsapi/internal/claim"
	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/operation"
	"github.com/paymentsapi/paymentsapi/internal/refuse"
	"github.com/paymentsapi/paymentsapi/internal/statemachine"
)

// Port is what another operation may do with a payment (a refund acts on
// its payment through it): read it, and queue the payments' own statements
// beside its own, so that only this package writes the payments table.
// *Service is the Port; another operation names payments in its
// operation.Module.Uses and finds it with
// operation.Lookup[payments.Port](env, payments.OperationCreate).
type Port interface {
	// Get returns the tenant's payment, or ErrNotFound.
	Get(ctx context.Context, tenant, id string) (Payment, error)
	// QueueLockSucceeded adds to a claim's batch (idempotency.Request.Create)
	// the lock of the tenant's payment id, which must exist and have
	// succeeded; otherwise the statement refuses (LockRefusal tells which).
	// What is queued after it and acts on the payment runs once a
	// concurrent holder of the lock is done. Like every statement of a
	// claim's batch, it locks and refuses nothing unless the claim took its
	// key (a claim.Statement).
	QueueLockSucceeded(b *claim.Batch, tenant, id string)
	// QueueRefunded adds to b the count of amountMinor refunded of payment
	// id (refundedAmount; never above the payment: a CHECK).
	QueueRefunded(b *pgx.Batch, id string, amountMinor int64)
}

var _ Port = (*Service)(nil)

// CapturedSQL is the SQL expression of the amount captured of the payments
// row aliased alias, in minor units: what its refunds may return in all. It
// is the payments' rule, written once here for the statements of other
// packages that read a payment's row (a refund's check of what is left).
func CapturedSQL(alias string) string {
	return "COALESCE(" + alias + ".captured_minor, " + alias + ".amount_minor)"
}

// Errors of QueueLockSucceeded's statement, as LockRefusal returns them.
var (
	// ErrNotSucceeded: the payment has not succeeded (it may still).
	ErrNotSucceeded = errors.New("the payment has not succeeded")
)

// The refusals of QueueLockSucceeded.
const (
	refuseLockNotFound     refuse.Code = "PA110"
	refuseLockNotSucceeded refuse.Code = "PA111"
)

func (s *Service) QueueLockSucceeded(b *claim.Batch, tenant, id string) {
	b.Queue(claim.Gated(func(claimed string) string {
		return `
		WITH p AS (SELECT state FROM payments WHERE ` + claimed + ` AND id = $1 AND tenant_id = $2 FOR UPDATE)
		SELECT ` + refuse.Unless(claim.Implies(claimed, "EXISTS (SELECT FROM p)"), refuseLockNotFound, "'payment not found'", "") + `,
		       ` + refuse.Unless("NOT EXISTS (SELECT FROM p) OR (SELECT state FROM p) = $3", refuseLockNotSucceeded,
			"'payment not succeeded'", "")
	}, id, tenant, StateCompleted))
}

// LockRefusal is ErrNotFound or ErrNotSucceeded when err is a refusal of
// QueueLockSucceeded's statement, else nil.
func LockRefusal(err error) error {
	if _, ok := refuse.Is(err, refuseLockNotFound); ok {
		return ErrNotFound
	}
	if _, ok := refuse.Is(err, refuseLockNotSucceeded); ok {
		return ErrNotSucceeded
	}
	return nil
}

func (s *Service) QueueRefunded(b *pgx.Batch, id string, amountMinor int64) {
	b.Queue(`UPDATE payments SET refunded_minor = refunded_minor + $2 WHERE id = $1`, id, amountMinor)
}

// Actions is what the operations on an authorized payment (a capture, a
// void: internal/authorizations) may do with it, through the payments' own
// statements. *Service is the Actions port too.
//
// The payment's move out of StateAuthorized is the lock: QueueBegin moves it
// to StateCaptureRequested or StateVoidRequested in the action's claim, so
// that of any number of concurrent actions on one payment exactly one
// begins; the others' claims refuse (ActionRefusal). The move names the
// action that made it (Payment.HeldBy), and only that action moves the
// payment on, fenced by its own key and by that name: QueueEnd. An action
// that never held the payment (a cancel whose claim found a payment that
// moved no money) cannot hand back another's hold.
type Actions interface {
	Get(ctx context.Context, tenant, id string) (Payment, error)
	// QueueBegin adds to a claim's batch the begin of action actionID on
	// the tenant's payment id at now: the payment must be authorized and, for a
	// capture, its authorization not expired and amountMinor at most what
	// it may capture; otherwise the statement refuses. A void may also
	// begin on a payment that moved no money (never sent, or refused) and
	// whose key nobody holds: it moves to StateCancelRequested, and
	// ResolveCancel ends it. Like every
	// statement of a claim's batch it does nothing unless the claim took
	// its key (a claim.Statement).
	QueueBegin(ctx context.Context, b *claim.Batch, action Action, actionID, tenant, id string, amountMinor int64, now time.Time)
	// QueueEnd adds to b the payment's move at the end of action actionID,
	// which holds p (p.HeldFor): Captured (capturedMinor captured), Voided,
	// or Released (the authorization stands as it was). It returns the
	// payment as it will stand, and writes its event (PaymentSucceeded,
	// PaymentCanceled). The move is refused (statemachine.IsStaleWrite)
	// if another action holds the payment; one that does not hold p as
	// its writer saw it is refused before anything is queued. The event
	// keeps the trace of ctx (outbox.NewEvent).
	QueueEnd(ctx context.Context, b *pgx.Batch, p Payment, action Action, actionID string, end ActionEnd, capturedMinor int64, reason string, now time.Time) (Payment, error)
	// QueueStart adds to b the begin of action actionID on p, which its
	// writer saw authorized, outside a claim (an action the service issued
	// itself, or a cancel that found the payment authorized after all): a
	// guarded move, refused (statemachine.IsStaleWrite) if p moved since.
	// It returns p as it will stand, held by actionID.
	QueueStart(ctx context.Context, b *pgx.Batch, p Payment, action Action, actionID, reason string, now time.Time) Payment
	// ResolveCancel ends now a payment that a void's claim put in
	// StateCancelRequested (it moved no money), and returns it as it then
	// stands.
	ResolveCancel(ctx context.Context, tenant, id string) (Payment, error)
}

// Action is what an action does to an authorized payment.
type Action string

// The actions on an authorized payment.
const (
	ActionCapture Action = "capture"
	ActionVoid    Action = "void"
)

// requested is the payment's state while action is at the provider.
func (a Action) requested() State {
	if a == ActionCapture {
		return StateCaptureRequested
	}
	return StateVoidRequested
}

// ActionEnd is how an action on an authorized payment ended.
type ActionEnd int

// The ends of an action.
const (
	// Captured: the provider captured the payment (a capture).
	Captured ActionEnd = iota + 1
	// Voided: the authorization is canceled (a void, or a capture that
	// found it voided).
	Voided
	// Released: nothing changed at the provider (declined, or abandoned
	// without reaching it): the payment is authorized again.
	Released
)

var _ Actions = (*Service)(nil)

// Errors of QueueBegin's statement, as ActionRefusal returns them.
var (
	// ErrNotAuthorized: the payment is not waiting for its capture
	// (automatic, captured, canceled, declined, in flight, or another
	// action on it is at the provider).
	ErrNotAuthorized = errors.New("the payment is not authorized and waiting for its capture")
	// ErrAuthorizationExpired: the authorization ran out
	// (authorizationExpiresAt); the service voids it.
	ErrAuthorizationExpired = errors.New("the payment's authorization has expired")
)

// ExceedsCapturableError: a capture asked for more than the authorization.
type ExceedsCapturableError struct {
	CapturableMinor int64
	Currency        string
}

func (e *ExceedsCapturableError) Error() string {
	return "the capture amount exceeds what the authorization may capture"
}

// The refusals of QueueBegin.
const (
	refuseBeginNotFound      refuse.Code = "PA113"
	refuseBeginNotAuthorized refuse.Code = "PA114"
	refuseBeginExpired       refuse.Code = "PA115"
	refuseBeginExceeds       refuse.Code = "PA116" // detail: the capturable amount, in minor units
)

func (s *Service) QueueBegin(ctx context.Context, b *claim.Batch, action Action, actionID, tenant, id string, amountMinor int64, now time.Time) {
	// What a void may also end: a payment that moved no money and whose
	// key nobody holds (its client is not sending it right now).
	unsent := "FALSE"
	if action == ActionVoid {
		unsent = `(SELECT state FROM p) IN ('` + string(StateReceived) + `', '` + string(StateFailedRetryable) + `')
		    AND NOT EXISTS (SELECT FROM idempotency_keys k
		                    WHERE k.resource_type = '` + ResourceType + `' AND k.resource_id = $1
		                      AND k.response_status IS NULL AND k.lease_expires_at > $4)`
	}
	b.Queue(claim.Gated(func(claimed string) string {
		return `
		WITH p AS (SELECT state, amount_minor, authorization_expires_at FROM payments
		           WHERE ` + claimed + ` AND id = $1 AND tenant_id = $2 FOR UPDATE)
		SELECT ` + refuse.Unless(claim.Implies(claimed, "EXISTS (SELECT FROM p)"), refuseBeginNotFound, "'payment not found'", "") + `,
		       ` + refuse.Unless("NOT EXISTS (SELECT FROM p) OR (SELECT state FROM p) = $3 OR ("+unsent+")", refuseBeginNotAuthorized,
			"'payment not authorized'", "") + `,
		       ` + refuse.Unless("NOT EXISTS (SELECT FROM p) OR $6 <> 'capture' OR (SELECT authorization_expires_at FROM p) > $4",
			refuseBeginExpired, "'authorization expired'", "") + `,
		       ` + refuse.Unless("NOT EXISTS (SELECT FROM p) OR (SELECT amount_minor FROM p) >= $5::bigint", refuseBeginExceeds,
			"'capture exceeds the authorization'", "(SELECT amount_minor FROM p)::text")
	}, id, tenant, StateAuthorized, now, amountMinor, string(action)))
	// The one move the state the payment is in allows, if the claim took
	// its key: each is made only from its own state, so at most one is.
	from := []State{StateAuthorized}
	if action == ActionVoid {
		from = append(from, StateReceived, StateFailedRetryable)
	}
	for _, f := range from {
		mv := statemachine.Move[State]{ID: id, From: f, To: action.requested(), Reason: string(action) + " requested", At: now,
			Set: []statemachine.Column{{Name: heldBy, Value: actionID}}}
		if f != StateAuthorized {
			mv.To, mv.Set = StateCancelRequested, nil
		}
		stmt, err := machine.MoveIfClaimed(ctx, mv, true)
		if err != nil {
			panic(err) // the moves are the machine's own: a mistake here is a programming error
		}
		b.Queue(stmt)
	}
}

// ResolveCancel ends a payment a cancel put in StateCancelRequested now, as
// its own key's owner would (see providerflow's CancelRequested): it takes
// the payment's key over unless a live owner holds it, and returns the
// payment as it then stands (still StateCancelRequested if it could not
// tell yet, or a live owner is at it).
func (s *Service) ResolveCancel(ctx context.Context, tenant, id string) (Payment, error) {
	_, err := s.d.Engine.ResolveNow(ctx, idempotency.Resource{Type: ResourceType, ID: id}, func(op string) idempotency.Operation {
		if op != OperationCreate {
			return nil
		}
		return s
	})
	if err != nil {
		s.d.Log.WarnContext(ctx, "canceled payment not resolved yet", "payment_id", id, "tenant", tenant, "error", err)
	}
	return s.Get(ctx, tenant, id)
}

// ActionRefusal is ErrNotFound, ErrNotAuthorized, ErrAuthorizationExpired or
// an *ExceedsCapturableError (in currency) when err is a refusal of
// QueueBegin's statement, else nil.
func ActionRefusal(err error, currency string) error {
	if _, ok := refuse.Is(err, refuseBeginNotFound); ok {
		return ErrNotFound
	}
	if _, ok := refuse.Is(err, refuseBeginNotAuthorized); ok {
		return ErrNotAuthorized
	}
	if _, ok := refuse.Is(err, refuseBeginExpired); ok {
		return ErrAuthorizationExpired
	}
	if detail, ok := refuse.Is(err, refuseBeginExceeds); ok {
		capturable, perr := strconv.ParseInt(detail, 10, 64)
		if perr != nil {
			return fmt.Errorf("capture refused with an unreadable amount %q: %w", detail, err)
		}
		return &ExceedsCapturableError{CapturableMinor: capturable, Currency: currency}
	}
	return nil
}

// heldBy is the column that names the action holding a payment.
const heldBy = "held_by"

func (s *Service) QueueEnd(ctx context.Context, b *pgx.Batch, p Payment, action Action, actionID string, end ActionEnd, capturedMinor int64, reason string, now time.Time) (Payment, error) {
	if !p.HeldFor(action, actionID) {
		return Payment{}, fmt.Errorf("payments: %s %s ends on payment %s (%s), which %s holds", action, actionID, p.ID, p.State, cmp.Or(p.HeldBy, "no action"))
	}
	from := action.requested()
	mv := statemachine.Move[State]{ID: p.ID, From: from, Reason: reason, At: now,
		Set: []statemachine.Column{{Name: heldBy, Value: nil, Type: "text"}},
		If:  []statemachine.Column{{Name: heldBy, Value: actionID}}}
	var eventType string
	switch end {
	case Captured:
		mv.To, eventType = StateCompleted, EventSucceeded
		mv.Set = append(mv.Set, statemachine.Column{Name: "captured_minor", Value: capturedMinor})
		p.CapturedMinor = &capturedMinor
	case Voided:
		mv.To, eventType = StateCanceled, EventCanceled
	case Released:
		mv.To = StateAuthorized
	default:
		return Payment{}, fmt.Errorf("payments: no end %d of an action", end)
	}
	if err := machine.QueueMove(ctx, b, mv); err != nil {
		return Payment{}, err
	}
	p.State, p.UpdatedAt, p.HeldBy = mv.To, now, ""
	return p, queueEvent(ctx, b, eventType, p, now)
}

func (s *Service) QueueStart(ctx context.Context, b *pgx.Batch, p Payment, action Action, actionID, reason string, now time.Time) Payment {
	// A move the machine allows: QueueMove cannot fail.
	_ = machine.QueueMove(ctx, b, statemachine.Move[State]{ID: p.ID, From: StateAuthorized, To: action.requested(), Reason: reason, At: now,
		Set: []statemachine.Column{{Name: heldBy, Value: actionID}}})
	p.State, p.UpdatedAt, p.HeldBy = action.requested(), now, actionID
	return p
}

// AuthorizedHook runs with the move of payment p to StateAuthorized: what
// it queues in b commits with the move. It returns p with what it decides
// of it: when its authorization expires (AuthorizationExpiresAt), which
// the operation that voids it at expiry sets.
type AuthorizedHook func(ctx context.Context, b *pgx.Batch, p Payment, now time.Time) (Payment, error)

// pointAuthorized is the one hook point the payments offer: their move to
// StateAuthorized.
const pointAuthorized = "authorized"

// WhenAuthorized declares hook, a method of the declaring module's
// operation T, as run with the move of every payment to StateAuthorized:
// one of that module's operation.Module.Hooks.
func WhenAuthorized[T operation.Instance](hook func(self T, ctx context.Context, b *pgx.Batch, p Payment, now time.Time) (Payment, error)) operation.Hook {
	return operation.Hook{Module: OperationCreate, Point: pointAuthorized, Of: func(self operation.Instance) (any, error) {
		t, ok := self.(T)
		if !ok {
			return nil, fmt.Errorf("the hook is a method of %T, and the module builds a %T", *new(T), self)
		}
		return AuthorizedHook(func(ctx context.Context, b *pgx.Batch, p Payment, now time.Time) (Payment, error) {
			return hook(t, ctx, b, p, now)
		}), nil
	}}
}

// AddHook adds hook at point (operation.Hooked): an AuthorizedHook at the
// payments' move to StateAuthorized.
func (s *Service) AddHook(point string, hook any) error {
	h, ok := hook.(AuthorizedHook)
	if point != pointAuthorized || !ok {
		return fmt.Errorf("payments offer one hook point, %q, for an AuthorizedHook, not %q for a %T", pointAuthorized, point, hook)
	}
	s.onAuthorized = append(s.onAuthorized, h)
	return nil
}
