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
//     reached it (Subject.LastSentAt, refused requests included): before
//     that, nothing is decided on it (a refused resource is neither
//     canceled nor left alone), and the next look is booked for when it
//     will be certain;
//   - a resource that moved no money (never sent, or refused and surely
//     unknown to the provider) ends, if its operation has such an end
//     (States.Canceled), once nobody finished it for Flow.AbandonAfter;
//   - anything else (timeout, lost answer, a pending answer, a provider that
//     cannot say) is an unknown outcome, for a retry or the reconciler;
//   - a success for another amount than the resource's (Subject.AmountMinor,
//     Answer.AmountMinor, both in the service's unit) is never a success:
//     the resource stays unknown and its key is left for a person, as when
//     the provider holds two objects for one key.
//
// The resource's provider history lives on its own row (Columns): when a
// request for it first left (the provider's key window runs from there;
// forgotten only once a certain "not found" proves that no refused request
// counted) and when the latest one left (never forgotten). A refusal may
// hide a processed request, so a refused resource whose first request is
// older than the key window is looked up before it is sent again. The flow
// writes both times with the moves it makes.
//
// Every write goes through the caller's idempotency.Owner, fenced.
package providerflow

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/paymentsapi/paymentsapi/internal/claim"
	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/metrics"
	"github.com/paymentsapi/paymentsapi/internal/provider"
	"github.com/paymentsapi/paymentsapi/internal/statemachine"
)

// ErrUnavailable is every flow's answer to a refusal that proves no money
// moved: a 503 PROVIDER_UNAVAILABLE to the client, whose retry with the
// same key resumes the same resource (nothing is stored).
var ErrUnavailable = errors.New("the payment provider is unavailable; no money moved, retry with the same Idempotency-Key")

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
	// Canceled ends a resource that moved no money once nobody finished
	// it for Flow.AbandonAfter. Empty: the operation has no such end.
	Canceled S
	// CancelRequested is where another operation puts a resource that
	// moved no money to have it end now: whoever owns its key next ends it
	// as an abandoned one (Canceled, once the provider surely never saw
	// it). Empty: the operation has no such state.
	CancelRequested S
	// RequiresAction is where a resource waits for its customer to act at
	// the provider (provider.StatusRequiresAction: 3-D Secure). The key's
	// answer is stored there, as at a success: what comes later is a move
	// of the resource that its operation makes, not the key's. Empty: the
	// operation has no such state, and such an answer is an unknown
	// outcome.
	RequiresAction S
}

// Columns names the columns of the resource's table that the flow writes
// with its moves (see DefaultColumns).
type Columns struct {
	ProviderReference string // the provider's id of the object
	DeclineCode       string // why the provider declined
	FirstSentAt       string // when a request first left (nil: none, or refused)
	LastSentAt        string // when the latest request left, refused or not
}

// DefaultColumns are the columns every operation of this service uses.
var DefaultColumns = Columns{
	ProviderReference: "provider_reference", DeclineCode: "decline_code",
	FirstSentAt: "first_sent_at", LastSentAt: "last_sent_at",
}

// Answer is what the provider said about a resource.
type Answer struct {
	ID          string
	Status      provider.Status
	DeclineCode string
	// AmountMinor is the amount the provider's object is for, in the
	// service's unit (ISO 4217 minor units), when the operation reads it: a
	// charge's amount, a refund's, a capture's captured amount; 0 when it
	// does not.
	AmountMinor int64
	// NextActionURL is where the customer acts, with
	// provider.StatusRequiresAction.
	NextActionURL string
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
	Columns Columns // DefaultColumns when zero
	Clock   clock.Clock
	// KeyWindow is how long the provider remembers its keys: past it, a
	// resource is only looked up, never sent again.
	KeyWindow time.Duration
	// RefusalGrace is how long after a refusal the reconciler looks the
	// resource up anyway (never sends it): a refusal proves nothing moved
	// only as far as the provider and the HTTP stack can be trusted, and a
	// lookup is always safe (REFUSAL_RECHECK). Default one minute; never
	// less than LookupLag, so that the look can be certain.
	RefusalGrace time.Duration
	// LookupLag is how long after a create the provider's lookup may still
	// miss it (the provider port declares it; PROVIDER_LOOKUP_LAG).
	LookupLag time.Duration
	// AbandonAfter is how long after its creation a resource that moved no
	// money waits for its client before it is canceled (States.Canceled;
	// IDEMPOTENCY_TTL for payments). Zero: never.
	AbandonAfter time.Duration
	// Timeout bounds one provider call (PROVIDER_TIMEOUT).
	Timeout time.Duration
	// Metrics measures the calls (paymentsapi_provider_call_duration_seconds), labelled
	// SendOp and LookupOp ("charge" and "lookup" for payments).
	Metrics          *metrics.Metrics
	SendOp, LookupOp string
	Hooks            Hooks
	// Log receives what a person must know (a success for another amount
	// than asked); nil: slog.Default().
	Log *slog.Logger
}

// Subject is one resource in the flow: its row, as its operation read it,
// and the operation that acts on it (Op).
type Subject[S State] struct {
	ID    string
	State S
	// CreatedAt and UpdatedAt are the resource's, as its row says (the
	// time of its last move).
	CreatedAt, UpdatedAt time.Time
	// FirstSentAt and LastSentAt are its provider history, as its row says
	// (Columns).
	FirstSentAt, LastSentAt *time.Time
	// AmountMinor is the amount the resource asks the provider to move, in
	// the service's unit: a success whose answer is for another amount
	// (Answer.AmountMinor) is left for a person. 0: the operation reads
	// no amount (a void).
	AmountMinor int64
	// Scheduled: the service issued the command itself
	// (idempotency.Engine.QueueScheduled), so the reconciler is its client:
	// it sends it (and sends a refused one again) where it would otherwise
	// only wait for a client, and it is never abandoned.
	Scheduled bool
	// Expires, if set, is when the resource's command lapses (a capture's
	// authorization runs out): from then on the flow never sends it. One
	// that never left, or whose requests the provider surely never
	// processed, is declined without a call (Expiry.DeclineCode); one the
	// provider holds is settled as the provider says.
	Expires *Expiry
	// Op is the operation's side of the resource: its provider calls, and
	// what it writes with each move. It may also be a Beginner.
	Op Operation[S]
}

// Operation is what the flow asks of an operation about one resource. The
// operation implements it on a small value that holds the resource, so
// that each call of the flow lands in a method named for what it does.
type Operation[S State] interface {
	// Send asks the provider to act, with the key derived from the
	// resource. The flow bounds and measures each call (Flow.Timeout,
	// Flow.Metrics).
	Send(ctx context.Context) (Answer, error)
	// Lookup asks the provider what became of that key.
	Lookup(ctx context.Context) (Answer, error)
	// Settle queues what the operation writes with the move to `to` (its
	// event, ...) and returns the result: rendered and stored by the engine
	// when `to` is final. The move itself records the provider's reference
	// and decline code (Columns).
	Settle(ctx context.Context, b *pgx.Batch, to S, a Answer, now time.Time) (idempotency.Result, error)
}

// Beginner is what an Operation also implements when something must commit
// with the resource's first move to the sent state (a scheduled action's
// claim on the resource it acts on); a refusal there stops the send. Such a
// resource never takes SendOnClaim's path: its begin needs the move's own
// transaction.
type Beginner interface {
	Begin(ctx context.Context, b *pgx.Batch, now time.Time)
}

// begins reports whether s's operation begins it with its first move to
// the sent state (Beginner).
func (s Subject[S]) begins() bool {
	_, ok := s.Op.(Beginner)
	return ok
}

// Expiry is when a resource's command lapses, and the decline code it
// then ends with.
type Expiry struct {
	At          time.Time
	DeclineCode string
}

// send asks the provider to act on s (Operation.Send).
func (f *Flow[S]) send(ctx context.Context, s Subject[S]) (Answer, error) {
	ctx, done := f.call(ctx, f.SendOp)
	return done(s.Op.Send(ctx))
}

// lookup asks the provider what became of s (Operation.Lookup).
func (f *Flow[S]) lookup(ctx context.Context, s Subject[S]) (Answer, error) {
	ctx, done := f.call(ctx, f.LookupOp)
	return done(s.Op.Lookup(ctx))
}

// call bounds one provider call by f.Timeout: the call runs on ctx, and
// done, given what it returned, measures it as op and returns it.
func (f *Flow[S]) call(ctx context.Context, op string) (_ context.Context, done func(Answer, error) (Answer, error)) {
	ctx, cancel := context.WithTimeout(ctx, f.Timeout)
	start := time.Now()
	return ctx, func(a Answer, err error) (Answer, error) {
		cancel()
		f.Metrics.ProviderCalls.WithLabelValues(op, provider.Outcome(a.Status, err)).Observe(time.Since(start).Seconds())
		return a, err
	}
}

// Resume takes s from its recorded state to a result, as own.
func (f *Flow[S]) Resume(ctx context.Context, own *idempotency.Owner, s Subject[S]) (idempotency.Result, error) {
	if r, ok := own.Resolution(); ok {
		return f.resolveAs(ctx, own, s, r)
	}
	switch {
	case own.First && s.State == f.States.Sent && !s.begins():
		// Moved to sent by its own claim (SendOnClaim): nobody else holds
		// the key or could have sent it.
		return f.sendAndSettle(ctx, own, s, true)
	case s.State == f.States.Sent, s.State == f.States.Unknown:
		return f.recoverOutcome(ctx, own, s)
	case f.States.CancelRequested != "" && s.State == f.States.CancelRequested:
		return f.abandon(ctx, own, s)
	case f.lapsed(s) && (s.State == f.Machine.Initial() || s.State == f.States.Retryable):
		return f.expire(ctx, own, s)
	case own.Recovering && !s.Scheduled && !f.settled(s.State) && f.abandoned(s):
		return f.abandon(ctx, own, s)
	case s.State == f.States.Retryable && own.Recovering && !s.Scheduled:
		// The client was told to retry; only the client sends it again.
		// The reconciler only asks whether the refusal was true.
		return f.checkRefusal(ctx, own, s)
	case own.Recovering && !s.Scheduled:
		// Never sent, not yet abandoned: only its client may send it.
		b := &pgx.Batch{}
		own.QueueRelease(b, f.idle(s))
		return nil, own.Commit(ctx, b)
	default:
		if f.settled(s.State) {
			// A final state is committed together with its stored answer,
			// so a key without an answer never points at a final resource.
			return nil, fmt.Errorf("%s %s is %s but its key has no stored answer", f.Machine.Name(), s.ID, s.State)
		}
		if s.State == f.States.Retryable && !f.insideKeyWindow(s) {
			// A refused request may have been processed, and the provider
			// may have forgotten its key since: sent again, it could be
			// processed twice. Ask first.
			return f.lookBeforeSending(ctx, own, s)
		}
		if err := f.move(ctx, own, &s, f.States.Sent, "sending to provider"); err != nil {
			return nil, err
		}
		// From a state where no call is on its way, the move, fenced, makes
		// this owner the only caller: a refusal means no money moved.
		return f.sendAndSettle(ctx, own, s, true)
	}
}

// resolveAs settles s as a person decided (idempotency.Engine.ResolveAs),
// after asking the provider: its success or decline settles s as it says,
// and refuses the opposite decision; a provider still processing, one that
// cannot be asked, and a "not found" that may still lag refuse both. Only
// when the provider holds nothing for the key, certainly, or holds more
// than one object (what sent the key to review) does the person's
// decision stand. The audit record commits with the move.
func (f *Flow[S]) resolveAs(ctx context.Context, own *idempotency.Owner, s Subject[S], r idempotency.Resolution) (idempotency.Result, error) {
	if s.State != f.States.Sent && s.State != f.States.Unknown {
		return nil, fmt.Errorf("%w: %s %s is %s, not an unknown outcome", idempotency.ErrNotResolvable, f.Machine.Name(), s.ID, s.State)
	}
	refused := func(said string) error { return &idempotency.ContradictedError{Outcome: r.Outcome, Provider: said} }
	a, err := f.lookup(ctx, s)
	var said string
	switch {
	case err == nil && a.Status == provider.StatusSucceeded:
		said = "reports it succeeded"
		if r.Outcome != idempotency.ResolvedSucceeded {
			return nil, refused(said)
		}
	case err == nil && a.Status == provider.StatusDeclined:
		said = "reports it declined (" + a.DeclineCode + ")"
		if r.Outcome != idempotency.ResolvedDeclined {
			return nil, refused(said)
		}
	case err == nil:
		return nil, refused("has not decided yet (" + string(a.Status) + "): wait for its answer")
	case errors.Is(err, provider.ErrNotFound):
		if certain, at := f.notFoundCertain(s); !certain {
			return nil, refused("does not show it yet, and may not until " + at.UTC().Format(time.RFC3339))
		}
		said, a = "holds nothing for its key", Answer{}
	case errors.Is(err, provider.ErrAmbiguous):
		said, a = "holds more than one object for its key ("+err.Error()+")", Answer{}
	default:
		return nil, refused("could not be asked (" + err.Error() + "): try again")
	}
	to := f.States.Succeeded
	if r.Outcome == idempotency.ResolvedDeclined {
		to = f.States.Declined
		if a.DeclineCode == "" {
			a.DeclineCode = "resolved_by_operator"
		}
	}
	reason := "resolved by a person as " + r.Outcome + " (the provider " + said + "): " + r.Reason
	return f.commit(ctx, own, s, to, reason, a, func(b *pgx.Batch) error { return own.QueueResolved(ctx, b, said) })
}

// lookBeforeSending sends a refused resource again whose first request
// left longer ago than the provider remembers keys, once the provider is
// certain it holds nothing for it; what it holds is settled.
func (f *Flow[S]) lookBeforeSending(ctx context.Context, own *idempotency.Owner, s Subject[S]) (idempotency.Result, error) {
	a, err := f.lookup(ctx, s)
	switch {
	case err == nil && f.decided(a):
		return f.settleFrom(ctx, own, s, f.States.Sent, a)
	case errors.Is(err, provider.ErrNotFound):
		if certain, _ := f.notFoundCertain(s); certain {
			s.FirstSentAt = nil // no request of the resource counted: the window starts anew
			if err := f.move(ctx, own, &s, f.States.Sent, "provider holds nothing of the refused requests: sending again"); err != nil {
				return nil, err
			}
			return f.sendAndSettle(ctx, own, s, true)
		}
	}
	// Nothing sent: the client may retry.
	if rerr := f.release(ctx, own, idempotency.LookSoon()); rerr != nil {
		return nil, rerr
	}
	return nil, fmt.Errorf("%w (looking up the earlier request first: %v)", ErrUnavailable, undecided(a, err)) //nolint:errorlint
}

func (f *Flow[S]) sendAndSettle(ctx context.Context, own *idempotency.Owner, s Subject[S], soleCall bool) (idempotency.Result, error) {
	if err := hook(ctx, f.Hooks.AfterSent, s.ID); err != nil {
		return nil, err
	}
	a, err := f.send(ctx, s)
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
	a, err := f.lookup(ctx, s)
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
	case errors.Is(err, provider.ErrNotFound) && f.lapsed(s):
		// The command lapsed: it is not sent again. If the provider surely
		// never processed it, it ends declined; until then it is unknown.
		if certain, _ := f.notFoundCertain(s); certain {
			return f.commit(ctx, own, s, f.States.Declined, "lapsed before the provider processed it", f.lapse(s))
		}
		return f.settle(ctx, own, s, Answer{}, fmt.Errorf("%w: lapsed, and the provider may not show it yet: %v", provider.ErrUnknownOutcome, err)) //nolint:errorlint
	case errors.Is(err, provider.ErrNotFound) && f.insideKeyWindow(s) && !own.LookupOnly:
		if err := f.move(ctx, own, &s, f.States.Sent, "provider never saw the key: sending again"); err != nil {
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
// s: its window runs from the first request that left for it.
func (f *Flow[S]) insideKeyWindow(s Subject[S]) bool {
	first := f.firstSent(s)
	if first == nil {
		return true // never sent: nothing the provider could have forgotten
	}
	return f.Clock.Now().Sub(*first) < f.KeyWindow
}

// firstSent is when the first request for s that counts left: its row's
// record, or, for a resource whose state says a request left but whose row
// has none (written by a release that kept it on the key), its creation:
// the window closes early rather than late.
func (f *Flow[S]) firstSent(s Subject[S]) *time.Time {
	if s.FirstSentAt == nil && (s.State == f.States.Sent || s.State == f.States.Unknown) {
		return &s.CreatedAt
	}
	return s.FirstSentAt
}

// lastSent is when the latest request for s left, refused or not: its
// row's record or, for a resource that left its initial state without one
// (see firstSent), its last move, which came after any request.
func (f *Flow[S]) lastSent(s Subject[S]) *time.Time {
	if s.LastSentAt == nil && s.State != f.Machine.Initial() {
		return &s.UpdatedAt
	}
	return s.LastSentAt
}

// checkRefusal is the reconciler's look at a resource the provider refused:
// if the provider holds it after all, it is settled. If the provider is
// certain it holds nothing, the resource stays retryable and waits for its
// client (the reconciler looks again only to abandon it); if its "not
// found" may still lag, the look is booked again for when it cannot. If
// the provider could not say, the reconciler's backoff applies.
func (f *Flow[S]) checkRefusal(ctx context.Context, own *idempotency.Owner, s Subject[S]) (idempotency.Result, error) {
	a, err := f.lookup(ctx, s)
	switch {
	case err == nil && f.decided(a):
		return f.settleFrom(ctx, own, s, f.States.Sent, a)
	case errors.Is(err, provider.ErrNotFound):
		certain, at := f.notFoundCertain(s)
		if !certain {
			return nil, f.release(ctx, own, idempotency.LookAt(at))
		}
		// The refused requests were not processed: none of them counts, and
		// the provider's key window starts with the next send.
		b := &pgx.Batch{}
		own.QueueRelease(b, f.idle(s))
		f.Machine.QueueSet(b, s.ID, s.State, []statemachine.Column{{Name: f.columns().FirstSentAt, Value: nil}})
		return nil, own.Commit(ctx, b)
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
	if f.lastSent(s) != nil {
		a, err := f.lookup(ctx, s)
		switch {
		case err == nil && f.decided(a):
			return f.settleFrom(ctx, own, s, f.States.Sent, a)
		case errors.Is(err, provider.ErrNotFound):
			if certain, at := f.notFoundCertain(s); !certain {
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

// lapsed reports whether s's command lapsed (Subject.Expires).
func (f *Flow[S]) lapsed(s Subject[S]) bool {
	return s.Expires != nil && !f.Clock.Now().Before(s.Expires.At)
}

// lapse is the answer a lapsed command ends with.
func (f *Flow[S]) lapse(s Subject[S]) Answer {
	return Answer{Status: provider.StatusDeclined, DeclineCode: s.Expires.DeclineCode}
}

// expire ends a resource whose command lapsed before it was sent, or while
// refused: declined, once the provider surely holds nothing of it (a
// refused request may have been processed: asked first); what the provider
// holds is settled. Nothing is sent. While the provider cannot say, a
// client is answered ErrUnavailable, and the look is booked again.
func (f *Flow[S]) expire(ctx context.Context, own *idempotency.Owner, s Subject[S]) (idempotency.Result, error) {
	if f.lastSent(s) != nil {
		a, err := f.lookup(ctx, s)
		look := idempotency.LookSoon()
		switch {
		case err == nil && f.decided(a):
			return f.settleFrom(ctx, own, s, f.States.Sent, a)
		case errors.Is(err, provider.ErrNotFound):
			certain, at := f.notFoundCertain(s)
			if certain {
				break
			}
			look = idempotency.LookAt(at)
			fallthrough
		default:
			if rerr := f.release(ctx, own, look); rerr != nil {
				return nil, rerr
			}
			return nil, fmt.Errorf("%w (the command lapsed; looking up its refused request first: %v)", ErrUnavailable, undecided(a, err)) //nolint:errorlint
		}
	}
	return f.commit(ctx, own, s, f.States.Declined, "lapsed before it reached the provider", f.lapse(s))
}

// notFoundCertain reports whether a lookup's "not found" is certain now:
// the provider's lookup lag has passed since the latest request that may
// have reached it. If not, at is when it will be.
func (f *Flow[S]) notFoundCertain(s Subject[S]) (certain bool, at time.Time) {
	now := f.Clock.Now()
	last := f.lastSent(s)
	if last == nil || f.LookupLag <= 0 {
		return true, now
	}
	at = last.Add(f.LookupLag)
	return !now.Before(at), at
}

// abandoned reports whether s moved no money for long enough to be
// canceled, if its operation has that end.
func (f *Flow[S]) abandoned(s Subject[S]) bool {
	return f.States.Canceled != "" && f.AbandonAfter > 0 && !f.Clock.Now().Before(s.CreatedAt.Add(f.AbandonAfter))
}

// idle is when the reconciler looks at a resource that moved no money and
// waits for its client: when it is abandoned, if the operation can end
// such a resource (States.Canceled); otherwise never.
func (f *Flow[S]) idle(s Subject[S]) idempotency.Look {
	if f.States.Canceled == "" || f.AbandonAfter <= 0 {
		return idempotency.LookNever()
	}
	return idempotency.LookAt(s.CreatedAt.Add(f.AbandonAfter))
}

// FirstLook is the look the claim of a resource created at now books
// (idempotency.Request.FirstLook), for a resource left in its initial
// state: when it is abandoned, if it can be; none otherwise.
func (f *Flow[S]) FirstLook(now time.Time) idempotency.Look {
	if f.States.Canceled == "" || f.AbandonAfter <= 0 {
		return idempotency.Look{}
	}
	return idempotency.LookAt(now.Add(f.AbandonAfter))
}

// SendOnClaim is what the request that claims a new resource's key queues
// in the claim's batch, after the resource's insert, to send it at once.
// The resource is created already sent: the caller's INSERT writes it in
// States.Sent, with its first and last send (Columns.FirstSentAt,
// LastSentAt) at now, in a state its machine lets a row be created in
// (statemachine.Machine.CreatedIn), and this statement records the
// creation, with the reason created, and the move to sent, as if it had
// been created in the initial state and moved on
// (statemachine.Machine.CreatedAs). So the claim's transaction sends it
// instead of a transaction of its own, and in one row version: a commit, a
// round trip and an UPDATE fewer per resource. It returns the statement and
// the look the claim books instead of FirstLook: as soon as the claim's
// lease runs out, since only a lookup can then tell whether a request
// left. A resource whose owner dies before its request leaves is looked
// up, then sent again inside the key window (the provider's key is derived
// from the resource), as one whose request was lost would be.
//
// The request's Resume then sees the resource in the sent state as its
// first owner (idempotency.Owner.First), and sends it as the only caller.
// A Subject whose Op is a Beginner cannot take this path (Begin runs in the
// move's own transaction): Resume looks such a one up before it sends.
func (f *Flow[S]) SendOnClaim(ctx context.Context, id, created string, now time.Time) (claim.Statement, idempotency.Look, error) {
	st, err := f.Machine.CreatedAs(ctx, id, f.States.Sent, created, "sending to provider", now)
	if err != nil {
		return claim.Statement{}, idempotency.Look{}, err
	}
	return st, idempotency.LookSoon(), nil
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
	if callErr == nil && a.Status == provider.StatusSucceeded && s.AmountMinor != 0 && a.AmountMinor != s.AmountMinor {
		return f.otherAmount(ctx, own, s, a)
	}
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
	case callErr == nil && a.Status == provider.StatusRequiresAction && f.States.RequiresAction != "":
		to, reason = f.States.RequiresAction, "provider waits for the customer to authenticate"
	case errors.Is(callErr, provider.ErrUnavailable):
		to, reason, resultErr = f.States.Retryable, "provider refused before processing: "+callErr.Error(), ErrUnavailable
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

// otherAmount leaves for a person a resource the provider says succeeded
// for another amount than the resource's: money moved, but not what was
// asked (a unit mistake, or an object someone changed at the provider).
// It is neither a success nor a failure: the resource stays unknown, and
// its key is marked for review, so the reconciler leaves it alone.
func (f *Flow[S]) otherAmount(ctx context.Context, own *idempotency.Owner, s Subject[S], a Answer) (idempotency.Result, error) {
	name := f.Machine.Name()
	reason := fmt.Sprintf("the provider reports %s %s for %d minor units, but it is for %d", name, a.ID, a.AmountMinor, s.AmountMinor)
	log := f.Log
	if log == nil {
		log = slog.Default()
	}
	log.ErrorContext(ctx, "the provider reports another amount than the "+name+"'s: left for a person",
		name+"_id", s.ID, "provider_reference", a.ID, "amount_minor", s.AmountMinor, "provider_amount_minor", a.AmountMinor)
	res, err := f.commit(ctx, own, s, f.States.Unknown, "left for a person: "+reason, Answer{})
	if err != nil {
		return nil, err
	}
	if err := own.MarkForReview(ctx, reason); err != nil {
		return nil, err
	}
	return res, nil
}

// commit moves s to `to` with the operation's writes and the key's
// statement (first: every writer locks the key row, then the resource's).
//
// Each of also queues what must commit with the move (a person's
// resolution's audit record).
func (f *Flow[S]) commit(ctx context.Context, own *idempotency.Owner, s Subject[S], to S, reason string, a Answer, also ...func(*pgx.Batch) error) (idempotency.Result, error) {
	now := f.Clock.Now()
	b := &pgx.Batch{}
	res, err := s.Op.Settle(ctx, b, to, a, now)
	if err != nil {
		return nil, err
	}
	cols := f.columns()
	var set []statemachine.Column
	key := &pgx.Batch{}
	switch {
	case f.settled(to):
		if err := own.QueueFinish(key, res); err != nil {
			return nil, err
		}
		if to == f.States.Succeeded || to == f.States.Declined || to == f.States.RequiresAction {
			set = statemachine.NonEmpty(
				statemachine.Column{Name: cols.ProviderReference, Value: a.ID},
				statemachine.Column{Name: cols.DeclineCode, Value: a.DeclineCode})
		}
	case to == f.States.Retryable:
		// The refused request may have been processed all the same: when
		// the first request left stays (the provider's key window runs from
		// it) until a certain "not found" proves none counted (checkRefusal).
		own.QueueRelease(key, idempotency.LookAt(now.Add(f.refusalGrace())))
	case to.NeedsRecovery():
		own.QueueRelease(key, idempotency.LookSoon())
	default:
		own.QueueRelease(key, f.idle(s))
	}
	if to != s.State {
		if err := f.Machine.QueueMove(ctx, key, statemachine.Move[S]{ID: s.ID, From: s.State, To: to, Reason: reason, At: now, Set: set}); err != nil {
			return nil, err
		}
	}
	key.QueuedQueries = append(key.QueuedQueries, b.QueuedQueries...)
	for _, queue := range also {
		if err := queue(key); err != nil {
			return nil, err
		}
	}
	if err := own.Commit(ctx, key); err != nil {
		return nil, err
	}
	return res, nil
}

// decided reports whether a is an answer the flow settles on: a success, a
// decline, or a wait for the customer where the operation has that state.
func (f *Flow[S]) decided(a Answer) bool {
	return a.Status == provider.StatusSucceeded || a.Status == provider.StatusDeclined ||
		(a.Status == provider.StatusRequiresAction && f.States.RequiresAction != "")
}

// settled reports whether a resource in s has its operation's final
// answer: a final state, or one of the flow's ends that other operations
// may still move on (a manual payment's authorization, States.Succeeded,
// waits for its capture; its key's answer is stored all the same).
func (f *Flow[S]) settled(s S) bool {
	return s.Final() || s == f.States.Succeeded || s == f.States.Declined ||
		(f.States.Canceled != "" && s == f.States.Canceled) ||
		(f.States.RequiresAction != "" && s == f.States.RequiresAction)
}

func (f *Flow[S]) columns() Columns {
	if f.Columns == (Columns{}) {
		return DefaultColumns
	}
	return f.Columns
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

// move takes s to the sent state (or keeps it there) in its own
// transaction, before a request leaves for the provider: it records the
// send on the resource's row (the first one that counts starts the key
// window; each one is the latest), and renews the lease, with a look booked
// no later than now, should the owner die: only a lookup can then tell (the
// lease still guards the key until it runs out). The reconciler's own
// resend keeps the look it booked when it claimed the key instead: its
// backoff, lest a resend that fails be due again in the same pass.
func (f *Flow[S]) move(ctx context.Context, own *idempotency.Owner, s *Subject[S], to S, reason string) error {
	now := f.Clock.Now()
	first := f.firstSent(*s)
	if first == nil {
		first = &now
	}
	cols := f.columns()
	set := []statemachine.Column{{Name: cols.FirstSentAt, Value: *first}, {Name: cols.LastSentAt, Value: now}}
	b := &pgx.Batch{}
	look := idempotency.LookBy(now)
	if own.Recovering {
		look = idempotency.LookSoon()
	}
	own.QueueHold(b, look)
	if begin, ok := s.Op.(Beginner); ok && s.State == f.Machine.Initial() {
		begin.Begin(ctx, b, now)
	}
	if s.State == to {
		f.Machine.QueueSet(b, s.ID, s.State, set)
	} else if err := f.Machine.QueueMove(ctx, b, statemachine.Move[S]{ID: s.ID, From: s.State, To: to, Reason: reason, At: now, Set: set}); err != nil {
		return err
	}
	if err := own.Commit(ctx, b); err != nil {
		return err
	}
	if s.State != to {
		s.UpdatedAt = now
	}
	s.State, s.FirstSentAt, s.LastSentAt = to, first, &now
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
