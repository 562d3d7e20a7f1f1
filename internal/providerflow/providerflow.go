// Package providerflow is the one way an operation takes a resource through
// the payment provider, whatever the resource (a payment, a refund): record
// that the request is being sent, call the provider with the key derived
// from the resource, and settle what it said; or, when a request may already
// have reached the provider, ask first.
//
// It owns the rules that decide whether money may have moved:
//   - the move to the "sent" state commits before the call;
//   - a refusal (provider.ErrUnavailable) proves nothing moved only when it
//     answers the one call that can have reached the provider: a send from a
//     state where no earlier call is on its way. After a lookup-and-resend,
//     a refusal leaves the outcome unknown;
//   - a resource is sent again only when the provider is certain it never
//     saw the key, and still remembers keys as old as the resource, and
//     never by an owner that may only look up (idempotency.Owner.LookupOnly);
//   - a lookup's "not found" is certain only once the provider's lookup lag
//     (Flow.LookupLag) has passed since the latest request that may have
//     reached it (idempotency.Owner.LastSentAt, refused requests included):
//     before that, nothing is decided on it (a refused resource is neither
//     canceled nor left alone), and the next look is booked for when it
//     will be certain;
//   - anything else (timeout, lost answer, a pending answer, a provider that
//     cannot say) is an unknown outcome, for a retry or the reconciler.
//
// Every write goes through the caller's idempotency.Owner, fenced.
package providerflow

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/metrics"
	"github.com/paymentsapi/paymentsapi/internal/provider"
	"github.com/paymentsapi/paymentsapi/internal/statemachine"
)

// State is what a resource's states must tell the flow.
type State interface {
	~string
	Final() bool
	NeedsRecovery() bool
}

// States names the states of a machine the flow moves a resource through.
type States[S State] struct {
	Sent      S // recorded before the call: money may move from here on
	Succeeded S // the provider confirmed
	Declined  S // the provider declined
	Retryable S // the provider refused before processing: nothing moved
	Unknown   S // money may have moved; find out by asking
	// Canceled ends a resource that moved no money once its key is
	// abandoned (Owner.Abandoned). Empty: the operation has no such end.
	Canceled S
}

// Answer is what the provider said about a resource.
type Answer struct {
	ID          string
	Status      provider.Status
	DeclineCode string
}

// Hooks are failpoints for tests; each runs after the named step.
type Hooks struct {
	AfterSent   func(ctx context.Context, id string) error
	AfterAnswer func(ctx context.Context, id string) error
}

// Flow is one operation's use of the provider.
type Flow[S State] struct {
	Machine *statemachine.Machine[S]
	States  States[S]
	Clock   clock.Clock
	// KeyWindow is how long the provider remembers its keys: past it, a
	// resource is only looked up, never sent again.
	KeyWindow time.Duration
	// ErrUnavailable is the operation's answer to a refusal that proves no
	// money moved (a 503 to the client).
	ErrUnavailable error
	// RefusalGrace is how long after a refusal the reconciler looks the
	// resource up anyway (never sends it): a refusal proves nothing moved
	// only as far as the provider and the HTTP stack can be trusted, and a
	// lookup is always safe (REFUSAL_RECHECK). Default one minute; never
	// less than LookupLag, so that the look can be certain.
	RefusalGrace time.Duration
	// LookupLag is how long after a create the provider's lookup may still
	// miss it (the provider port declares it; PROVIDER_LOOKUP_LAG).
	LookupLag time.Duration
	// Timeout bounds one provider call (PROVIDER_TIMEOUT).
	Timeout time.Duration
	// Metrics measures the calls (paymentsapi_provider_call_duration_seconds), labelled
	// SendOp and LookupOp ("charge" and "lookup" for payments).
	Metrics          *metrics.Metrics
	SendOp, LookupOp string
	Hooks            Hooks
}

// Subject is one resource in the flow, as its operation describes it.
type Subject[S State] struct {
	ID    string
	State S
	// Send asks the provider to act, with the key derived from the resource.
	// The flow bounds and measures each call (Flow.Timeout, Flow.Metrics).
	Send func(ctx context.Context) (Answer, error)
	// Lookup asks the provider what became of that key.
	Lookup func(ctx context.Context) (Answer, error)
	// Settle queues what the operation writes with the move to `to` (its
	// event, ...) and returns the result: rendered and stored by the engine
	// when `to` is final. The move itself records the provider's reference
	// and decline code (columns provider_reference, decline_code).
	Settle func(b *pgx.Batch, to S, a Answer, now time.Time) (idempotency.Result, error)
}

// call makes one provider call, bounded by f.Timeout and measured as op.
func (f *Flow[S]) call(ctx context.Context, op string, call func(context.Context) (Answer, error)) (Answer, error) {
	ctx, cancel := context.WithTimeout(ctx, f.Timeout)
	defer cancel()
	start := time.Now()
	a, err := call(ctx)
	f.Metrics.ProviderCalls.WithLabelValues(op, provider.Outcome(a.Status, err)).Observe(time.Since(start).Seconds())
	return a, err
}

// Resume takes s from its recorded state to a result, as own.
func (f *Flow[S]) Resume(ctx context.Context, own *idempotency.Owner, s Subject[S]) (idempotency.Result, error) {
	switch {
	case s.State == f.States.Sent, s.State == f.States.Unknown:
		return f.recoverOutcome(ctx, own, s)
	case own.Recovering && !s.State.Final() && own.Abandoned() && f.States.Canceled != "":
		return f.abandon(ctx, own, s)
	case s.State == f.States.Retryable && own.Recovering:
		// The client was told to retry; only the client sends it again.
		// The reconciler only asks whether the refusal was true.
		return f.checkRefusal(ctx, own, s)
	case own.Recovering:
		// Never sent, not yet abandoned: only its client may send it.
		b := &pgx.Batch{}
		own.QueueRelease(b, f.idle(own))
		return nil, own.Commit(ctx, b)
	default:
		if s.State.Final() {
			// A final state is committed together with its stored answer,
			// so a key without an answer never points at a final resource.
			return nil, fmt.Errorf("%s %s is %s but its key has no stored answer", f.Machine.Name(), s.ID, s.State)
		}
		if err := f.move(ctx, own, &s, f.States.Sent, "sending to provider"); err != nil {
			return nil, err
		}
		// From a state where no call is on its way, the move, fenced, makes
		// this owner the only caller: a refusal means no money moved.
		return f.sendAndSettle(ctx, own, s, true)
	}
}

func (f *Flow[S]) sendAndSettle(ctx context.Context, own *idempotency.Owner, s Subject[S], soleCall bool) (idempotency.Result, error) {
	if err := hook(ctx, f.Hooks.AfterSent, s.ID); err != nil {
		return nil, err
	}
	a, err := f.call(ctx, f.SendOp, s.Send)
	if err := hook(ctx, f.Hooks.AfterAnswer, s.ID); err != nil {
		return nil, err
	}
	if errors.Is(err, provider.ErrUnavailable) && !soleCall {
		// An earlier call (a dead owner's, or one whose answer was lost)
		// may still reach the provider: this refusal proves nothing.
		err = fmt.Errorf("%w: refused, but an earlier call may still be processed: %v", provider.ErrUnknownOutcome, err) //nolint:errorlint
	}
	return f.settle(ctx, own, s, a, err)
}

func (f *Flow[S]) recoverOutcome(ctx context.Context, own *idempotency.Owner, s Subject[S]) (idempotency.Result, error) {
	a, err := f.call(ctx, f.LookupOp, s.Lookup)
	switch {
	case err == nil:
		if err := hook(ctx, f.Hooks.AfterAnswer, s.ID); err != nil {
			return nil, err
		}
		return f.settle(ctx, own, s, a, nil)
	case errors.Is(err, provider.ErrAmbiguous):
		// More than one object for one key: money may have moved twice.
		// Nobody can decide that by asking again: a person must.
		res, settleErr := f.settle(ctx, own, s, Answer{}, fmt.Errorf("%w: lookup: %v", provider.ErrUnknownOutcome, err)) //nolint:errorlint
		if settleErr != nil {
			return nil, settleErr
		}
		if err := own.MarkForReview(ctx, err.Error()); err != nil {
			return nil, err
		}
		return res, nil
	case errors.Is(err, provider.ErrNotFound) && f.insideKeyWindow(own) && !own.LookupOnly:
		if s.State == f.States.Unknown {
			err = f.move(ctx, own, &s, f.States.Sent, "provider never saw the key: sending again")
		} else {
			b := &pgx.Batch{}
			own.QueueSending(b) // a second call follows: renew the lease
			err = own.Commit(ctx, b)
		}
		if err != nil {
			return nil, err
		}
		return f.sendAndSettle(ctx, own, s, false)
	default:
		// %v, not %w: a lookup that cannot say must not read as "refused
		// before processing", which would mark the resource retryable.
		return f.settle(ctx, own, s, Answer{}, fmt.Errorf("%w: lookup: %v", provider.ErrUnknownOutcome, err)) //nolint:errorlint
	}
}

// insideKeyWindow reports whether the provider still remembers the key of
// own's resource: its window runs from the first request that left for it.
func (f *Flow[S]) insideKeyWindow(own *idempotency.Owner) bool {
	if own.FirstSentAt == nil {
		return true // never sent: nothing the provider could have forgotten
	}
	return f.Clock.Now().Sub(*own.FirstSentAt) < f.KeyWindow
}

// checkRefusal is the reconciler's look at a resource the provider refused:
// if the provider holds it after all, it is settled. If the provider is
// certain it holds nothing, the resource stays retryable and waits for its
// client (the reconciler looks again only to abandon it); if its "not
// found" may still lag, the look is booked again for when it cannot. If
// the provider could not say, the reconciler's backoff applies.
func (f *Flow[S]) checkRefusal(ctx context.Context, own *idempotency.Owner, s Subject[S]) (idempotency.Result, error) {
	a, err := f.call(ctx, f.LookupOp, s.Lookup)
	switch {
	case err == nil && (a.Status == provider.StatusSucceeded || a.Status == provider.StatusDeclined):
		return f.settleFrom(ctx, own, s, f.States.Sent, a)
	case errors.Is(err, provider.ErrNotFound):
		look := f.idle(own)
		if certain, at := f.notFoundCertain(own); !certain {
			look = idempotency.LookAt(at)
		}
		return nil, f.release(ctx, own, look)
	default:
		if err := f.release(ctx, own, idempotency.LookSoon()); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("look up refused %s %s: %w", f.Machine.Name(), s.ID, undecided(a, err))
	}
}

// abandon ends a resource whose key nobody finished in time and that moved
// no money: never sent, or refused. If a request ever left for it (or was
// refused, which may hide a processed request), the provider is asked
// first: what it holds is settled; only what it surely never saw (its
// "not found" past the lookup lag) is canceled.
func (f *Flow[S]) abandon(ctx context.Context, own *idempotency.Owner, s Subject[S]) (idempotency.Result, error) {
	if own.LastSentAt != nil || own.FirstSentAt != nil || s.State == f.States.Retryable {
		a, err := f.call(ctx, f.LookupOp, s.Lookup)
		switch {
		case err == nil && (a.Status == provider.StatusSucceeded || a.Status == provider.StatusDeclined):
			return f.settleFrom(ctx, own, s, f.States.Sent, a)
		case errors.Is(err, provider.ErrNotFound):
			if certain, at := f.notFoundCertain(own); !certain {
				return nil, f.release(ctx, own, idempotency.LookAt(at))
			}
		default:
			if rerr := f.release(ctx, own, idempotency.LookSoon()); rerr != nil {
				return nil, rerr
			}
			return nil, fmt.Errorf("abandoned %s %s: lookup: %w", f.Machine.Name(), s.ID, undecided(a, err))
		}
	}
	return f.commit(ctx, own, s, f.States.Canceled, "abandoned: no request moved money, nobody finished it", Answer{})
}

// notFoundCertain reports whether a lookup's "not found" is certain now:
// the provider's lookup lag has passed since the latest request that may
// have reached it. If not, at is when it will be.
func (f *Flow[S]) notFoundCertain(own *idempotency.Owner) (certain bool, at time.Time) {
	now := f.Clock.Now()
	if f.LookupLag <= 0 {
		return true, now
	}
	last := own.LastSentAt
	if last == nil {
		last = own.FirstSentAt
	}
	if last == nil {
		// The resource's state says a request left (it was refused), but
		// the key has no record of when: one may have left just now.
		own.AssumeSentNow()
		return false, now.Add(f.LookupLag)
	}
	at = last.Add(f.LookupLag)
	return !now.Before(at), at
}

// idle is when the reconciler looks at a resource that moved no money and
// waits for its client: when its key is abandoned, if the operation can
// end such a resource (States.Canceled); otherwise never.
func (f *Flow[S]) idle(own *idempotency.Owner) idempotency.Look {
	if f.States.Canceled == "" || own.AbandonAt == nil {
		return idempotency.LookNever()
	}
	return idempotency.LookAt(*own.AbandonAt)
}

// release ends own's lease without a final answer, booking look.
func (f *Flow[S]) release(ctx context.Context, own *idempotency.Owner, look idempotency.Look) error {
	b := &pgx.Batch{}
	own.QueueRelease(b, look)
	return own.Commit(ctx, b)
}

// undecided is the error of a lookup that settled nothing: its own, or
// the status the provider has not decided on.
func undecided(a Answer, err error) error {
	if err != nil {
		return err
	}
	return fmt.Errorf("provider has not decided: %s", a.Status)
}

// settleFrom settles a refused resource the provider turned out to hold:
// through the sent state, so the machine records what happened.
func (f *Flow[S]) settleFrom(ctx context.Context, own *idempotency.Owner, s Subject[S], via S, a Answer) (idempotency.Result, error) {
	if err := f.move(ctx, own, &s, via, "provider holds the refused request after all"); err != nil {
		return nil, err
	}
	return f.settle(ctx, own, s, a, nil)
}

// settle commits what the provider said in one transaction: the move, the
// operation's writes, and the stored answer (final) or the released key.
func (f *Flow[S]) settle(ctx context.Context, own *idempotency.Owner, s Subject[S], a Answer, callErr error) (idempotency.Result, error) {
	var (
		to        S
		reason    string
		resultErr error
	)
	switch {
	case callErr == nil && a.Status == provider.StatusSucceeded:
		to, reason = f.States.Succeeded, "provider confirmed"
	case callErr == nil && a.Status == provider.StatusDeclined:
		to, reason = f.States.Declined, "provider declined: "+a.DeclineCode
	case errors.Is(callErr, provider.ErrUnavailable):
		to, reason, resultErr = f.States.Retryable, "provider refused before processing: "+callErr.Error(), f.ErrUnavailable
	case callErr == nil:
		to, reason = f.States.Unknown, "provider has not decided: "+string(a.Status)
	default:
		to, reason = f.States.Unknown, "outcome unknown: "+callErr.Error()
	}
	res, err := f.commit(ctx, own, s, to, reason, a)
	if err != nil {
		return nil, err
	}
	if resultErr != nil {
		return nil, resultErr
	}
	return res, nil
}

// commit moves s to `to` with the operation's writes and the key's
// statement (first: every writer locks the key row, then the resource's).
func (f *Flow[S]) commit(ctx context.Context, own *idempotency.Owner, s Subject[S], to S, reason string, a Answer) (idempotency.Result, error) {
	now := f.Clock.Now()
	b := &pgx.Batch{}
	res, err := s.Settle(b, to, a, now)
	if err != nil {
		return nil, err
	}
	var set []statemachine.Column
	if to == f.States.Succeeded || to == f.States.Declined {
		set = statemachine.NonEmpty(
			statemachine.Column{Name: "provider_reference", Value: a.ID},
			statemachine.Column{Name: "decline_code", Value: a.DeclineCode})
	}
	key := &pgx.Batch{}
	switch {
	case to.Final():
		if err := own.QueueFinish(key, res); err != nil {
			return nil, err
		}
	case to == f.States.Retryable:
		own.QueueRefused(key, idempotency.LookAt(now.Add(f.refusalGrace())))
	case to.NeedsRecovery():
		own.QueueRelease(key, idempotency.LookSoon())
	default:
		own.QueueRelease(key, f.idle(own))
	}
	if to != s.State {
		if err := f.Machine.QueueMove(key, statemachine.Move[S]{ID: s.ID, From: s.State, To: to, Reason: reason, At: now, Set: set}); err != nil {
			return nil, err
		}
	}
	key.QueuedQueries = append(key.QueuedQueries, b.QueuedQueries...)
	if err := own.Commit(ctx, key); err != nil {
		return nil, err
	}
	return res, nil
}

// refusalGrace is how long after a refusal the reconciler looks: the
// grace, and never before the lookup can be certain.
func (f *Flow[S]) refusalGrace() time.Duration {
	grace := f.RefusalGrace
	if grace <= 0 {
		grace = time.Minute
	}
	return max(grace, f.LookupLag)
}

// move takes s to `to` in its own transaction, and renews the lease: a
// provider call follows.
func (f *Flow[S]) move(ctx context.Context, own *idempotency.Owner, s *Subject[S], to S, reason string) error {
	b := &pgx.Batch{}
	if to == f.States.Sent {
		own.QueueSending(b)
	} else {
		own.QueueHold(b, idempotency.LookSoon())
	}
	if err := f.Machine.QueueMove(b, statemachine.Move[S]{ID: s.ID, From: s.State, To: to, Reason: reason, At: f.Clock.Now()}); err != nil {
		return err
	}
	if err := own.Commit(ctx, b); err != nil {
		return err
	}
	s.State = to
	return nil
}

// hook runs a failpoint; its error stops the work as a crash would.
func hook(ctx context.Context, h func(context.Context, string) error, id string) error {
	if h == nil {
		return nil
	}
	if err := h(ctx, id); err != nil {
		return fmt.Errorf("%w: %w", idempotency.ErrCrashed, err)
	}
	return nil
}
