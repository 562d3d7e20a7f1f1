package authorizations

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paymentsapi/paymentsapi/internal/claim"
	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/metrics"
	"github.com/paymentsapi/paymentsapi/internal/payments"
	"github.com/paymentsapi/paymentsapi/internal/provider"
	"github.com/paymentsapi/paymentsapi/internal/providerflow"
	"github.com/paymentsapi/paymentsapi/internal/statemachine"
)

// Config holds the rules of an action's way through the provider.
type Config struct {
	ProviderTimeout   time.Duration // bound of one provider call
	ProviderKeyWindow time.Duration // past it, an action is only looked up, never sent again
	ProviderLookupLag time.Duration // how long a lookup may miss a new object
	RefusalRecheck    time.Duration // how long after a refusal the reconciler looks anyway
	// AbandonAfter is how long an action that moved no money (refused, and
	// not retried by its client) waits before it is canceled and the
	// payment is authorized again (IDEMPOTENCY_TTL).
	AbandonAfter time.Duration
	// AuthorizationTTL is how long a manual payment's authorization lasts
	// (AUTHORIZATION_TTL; 0: DefaultAuthorizationTTL): the cancel operation
	// voids it then.
	AuthorizationTTL time.Duration
}

// Deps are the collaborators of a Service.
type Deps struct {
	DB       *pgxpool.Pool
	Engine   *idempotency.Engine
	Provider provider.Captures
	Clock    clock.Clock
	Log      *slog.Logger
	Metrics  *metrics.Metrics
}

// Service is one of the two operations (capture_payment, cancel_payment):
// it creates its actions idempotently and, as the engine's Operation, takes
// an action whose key it owns to an answer.
type Service struct {
	k    kind
	d    Deps
	pay  payments.Actions
	flow *providerflow.Flow[State]
	// authorizationTTL is Config.AuthorizationTTL, or its default.
	authorizationTTL time.Duration
}

var _ idempotency.Operation = (*Service)(nil)

func newService(k kind, d Deps, pay payments.Actions, cfg Config) *Service {
	if cfg.AuthorizationTTL <= 0 {
		cfg.AuthorizationTTL = DefaultAuthorizationTTL
	}
	return &Service{k: k, d: d, pay: pay, authorizationTTL: cfg.AuthorizationTTL, flow: &providerflow.Flow[State]{
		Machine: machine,
		States: providerflow.States[State]{
			Sent: StateProviderRequestSent, Succeeded: StateSucceeded, Declined: StateDeclined,
			Retryable: StateFailedRetryable, Unknown: StateUnknown, Canceled: StateCanceled,
		},
		Clock: d.Clock, KeyWindow: cfg.ProviderKeyWindow, Timeout: cfg.ProviderTimeout,
		Metrics: d.Metrics, SendOp: k.sendOp, LookupOp: k.lookupOp,
		LookupLag: cfg.ProviderLookupLag, RefusalGrace: cfg.RefusalRecheck, AbandonAfter: cfg.AbandonAfter, Log: d.Log,
	}}
}

// NewCaptures returns the capture_payment operation, acting on the
// payments through pay.
func NewCaptures(d Deps, pay payments.Actions, cfg Config) *Service {
	return newService(capture, d, pay, cfg)
}

// NewCancels returns the cancel_payment operation.
func NewCancels(d Deps, pay payments.Actions, cfg Config) *Service {
	return newService(cancel, d, pay, cfg)
}

// Name is the operation's name in every key's scope.
func (s *Service) Name() string { return s.k.operation }

// Errors of the two operations. None is stored for replay.
var (
	// ErrPaymentNotFound: no such payment for this tenant (404).
	ErrPaymentNotFound = errors.New("payment not found")
	// ErrNotCapturable: the payment is not REQUIRES_CAPTURE (automatic,
	// captured, canceled, declined, in flight), or a capture or a cancel of
	// it is already at the provider (409 PAYMENT_NOT_CAPTURABLE).
	ErrNotCapturable = errors.New("the payment is not waiting for its capture")
	// ErrNotCancelable: the payment is not REQUIRES_CAPTURE, or an action
	// on it is in flight (409 PAYMENT_NOT_CANCELABLE).
	ErrNotCancelable = errors.New("the payment cannot be canceled in its state")
	// ErrAuthorizationExpired: past authorizationExpiresAt (409).
	ErrAuthorizationExpired = payments.ErrAuthorizationExpired
)

// prepare reads the tenant's payment and validates the request against it.
func (s *Service) prepare(ctx context.Context, tenant, paymentID string, validate func(payments.Payment) (Command, error)) (Command, error) {
	p, err := s.pay.Get(ctx, tenant, paymentID)
	if errors.Is(err, payments.ErrNotFound) {
		return Command{}, ErrPaymentNotFound
	}
	if err != nil {
		return Command{}, err
	}
	return validate(p)
}

// Create runs cmd under the tenant's key: the first request claims the key,
// moves the payment out of AUTHORIZED (if it may) and creates the action, in
// one transaction, then takes the action through the provider; retries are
// answered by the engine.
func (s *Service) Create(ctx context.Context, tenant, key string, cmd Command, wait time.Duration) (idempotency.Reply, error) {
	// A capture's amount the provider's currency rules refuse is refused
	// before the claim of a new key: nothing is stored. A void moves no
	// amount.
	scope := idempotency.Scope{Tenant: tenant, Operation: s.k.operation, Key: key}
	if s.k.action == payments.ActionCapture {
		unsendable := provider.Check(s.d.Provider, provider.Proposal{AmountMinor: cmd.AmountMinor, Currency: cmd.Currency})
		if err := s.d.Engine.RefuseNew(ctx, s, scope, unsendable); err != nil {
			return idempotency.Reply{}, err
		}
	}
	now := s.d.Clock.Now()
	fingerprint := cmd.fingerprint(s.k.operation)
	a := Action{
		ID: s.k.deriveID(tenant, key, fingerprint), TenantID: tenant, PaymentID: cmd.PaymentID, Kind: s.k.action,
		AmountMinor: cmd.AmountMinor, Currency: cmd.Currency, Reason: cmd.Reason,
		State: machine.Initial(), CreatedAt: now, UpdatedAt: now,
	}
	reply, err := s.d.Engine.Do(ctx, s, idempotency.Request{
		Scope:       scope,
		Fingerprint: fingerprint,
		Resource:    idempotency.Resource{Type: s.k.resource, ID: a.ID},
		Create: func(b *claim.Batch) {
			s.pay.QueueBegin(ctx, b, s.k.action, a.ID, tenant, a.PaymentID, a.AmountMinor, now)
			queueInsert(b, a)
			b.Queue(machine.Created(ctx, a.ID, string(a.Kind)+" requested", a.CreatedAt))
		},
		Wait:      wait,
		FirstLook: s.flow.FirstLook(now),
		// A retry whose key clean-up deleted finds the payment moved on by
		// its own action: the payment's refusal, asked about, is the key
		// expired.
		Exists: idempotency.RowExists(s.d.DB, `SELECT FROM payment_actions WHERE id = $1 AND tenant_id = $2`, a.ID, tenant),
	})
	return reply, s.refusal(err, cmd.Currency)
}

// refusal translates the payment's refusal to begin the action into the
// operation's errors; any other error is returned as it is.
func (s *Service) refusal(err error, currency string) error {
	refused := payments.ActionRefusal(err, currency)
	switch {
	case refused == nil:
		return err
	case errors.Is(refused, payments.ErrNotFound):
		return ErrPaymentNotFound
	case errors.Is(refused, payments.ErrNotAuthorized) && s.k.action == payments.ActionCapture:
		return ErrNotCapturable
	case errors.Is(refused, payments.ErrNotAuthorized):
		return ErrNotCancelable
	}
	return refused
}

// ReasonExpired is the reason of the void the service issues itself when a
// payment's authorization runs out (clients cannot send it).
const ReasonExpired = "authorization_expired"

// expiryKey is the scope key of the void of payment id's expiry.
func expiryKey(paymentID string) string {
	return idempotency.ServiceKey("authorization-expiry:" + paymentID)
}

// scheduleExpiry sets, with p's move to AUTHORIZED, when its authorization
// expires (AUTHORIZATION_TTL from now), and queues the void the service
// issues itself then: its action, and a key of cancel_payment that the
// reconciler first looks at then (idempotency.Engine.QueueScheduled). If p
// was captured or canceled by then, it ends without a call.
func (s *Service) scheduleExpiry(ctx context.Context, b *pgx.Batch, p payments.Payment, now time.Time) (payments.Payment, error) {
	expires := now.Add(s.authorizationTTL)
	p.AuthorizationExpiresAt = &expires
	cmd := Command{PaymentID: p.ID, Currency: p.Command.Currency, Reason: ReasonExpired}
	fingerprint := cmd.fingerprint(s.k.operation)
	a := Action{
		ID: s.k.deriveID(p.TenantID, expiryKey(p.ID), fingerprint), TenantID: p.TenantID, PaymentID: p.ID, Kind: payments.ActionVoid,
		Currency: p.Command.Currency, Reason: ReasonExpired, State: machine.Initial(), CreatedAt: now, UpdatedAt: now,
	}
	s.d.Engine.QueueScheduled(b, idempotency.Request{
		Scope:       expiryScope(p.TenantID, p.ID), // the cancel's: only the cancel service schedules it
		Fingerprint: fingerprint,
		Resource:    idempotency.Resource{Type: s.k.resource, ID: a.ID},
		Create: func(b *claim.Batch) {
			queueInsert(b, a)
			b.Queue(machine.Created(ctx, a.ID, "authorization expiry scheduled", now))
		},
	}, expires)
	return p, nil
}

// Resume takes the action of a key the caller owns from its recorded state
// to a result.
func (s *Service) Resume(ctx context.Context, own *idempotency.Owner) (idempotency.Result, error) {
	a, err := getAction(ctx, s.d.DB, own.Tenant, own.Resource.ID)
	if err != nil {
		return nil, err
	}
	p, err := s.pay.Get(ctx, own.Tenant, a.PaymentID)
	if err != nil {
		return nil, err
	}
	scheduled := a.Reason == ReasonExpired
	if scheduled && a.State == machine.Initial() {
		if done, res, err := s.beforeExpiry(ctx, own, a, p); done {
			return res, err
		}
	}
	if !scheduled && a.Kind == payments.ActionVoid && a.State == machine.Initial() && !p.HeldFor(a.Kind, a.ID) {
		// The claim found a payment that moved no money, not an
		// authorization: it asked the payment to end instead.
		if p.State == payments.StateCancelRequested {
			if p, err = s.pay.ResolveCancel(ctx, own.Tenant, p.ID); err != nil {
				return nil, err
			}
		}
		switch p.State {
		case payments.StateCancelRequested:
			// Not yet: a live owner of the payment's key ends it, or the
			// provider cannot tell yet. Look again (a look that ends the
			// payment's key too): once it is authorized after all, this
			// cancel voids it, not the expiry a day later.
			return Result{Action: a, Payment: p}, s.lookAgain(ctx, own, a.CreatedAt)
		case payments.StateCaptureRequested, payments.StateVoidRequested:
			// Found authorized after all, and another action took the
			// authorization first: this cancel waits for its end (a void
			// that ends the payment ends this cancel too; a capture
			// declines it) and never touches its hold.
			return Result{Action: a, Payment: p}, s.awaitHolder(ctx, own, a, p, a.CreatedAt)
		case payments.StateCanceled:
			return s.end(ctx, own, a, p, StateSucceeded, "", "the payment is canceled")
		case payments.StateAuthorized:
			// The provider had authorized it after all: void it, as the
			// client asked (the service sends it, whoever owns the key).
			scheduled = true
		default:
			return s.end(ctx, own, a, p, StateDeclined, "payment_"+strings.ToLower(string(p.State.Status())),
				"the payment is "+string(p.State)+": nothing to cancel")
		}
	}
	var expires *providerflow.Expiry
	if a.Kind == payments.ActionCapture && p.AuthorizationExpiresAt != nil {
		// A capture is never sent past the authorization's expiry: the
		// claim checked it, and a retry of a refused capture, or a resend
		// after a lost one, checks it again.
		expires = &providerflow.Expiry{At: *p.AuthorizationExpiresAt, DeclineCode: ReasonExpired}
	}
	inflow := &inFlow{s: s, a: a, p: p}
	var op providerflow.Operation[State] = inflow
	if scheduled {
		reason := "authorization expired"
		if a.Reason != ReasonExpired {
			reason = "cancel of a payment found authorized after all"
		}
		op = issued{inflow, reason}
	}
	var amount int64 // what a capture must have captured; a void moves none
	if a.Kind == payments.ActionCapture {
		amount = a.AmountMinor
	}
	return s.flow.Resume(ctx, own, providerflow.Subject[State]{
		ID: a.ID, State: a.State, CreatedAt: a.CreatedAt, UpdatedAt: a.UpdatedAt, AmountMinor: amount,
		FirstSentAt: a.FirstSentAt, LastSentAt: a.LastSentAt, Scheduled: scheduled, Expires: expires, Op: op,
	})
}

// inFlow is action a on payment p as the provider flow takes it: the
// flow's providerflow.Operation, whose Send captures or voids p.
type inFlow struct {
	s *Service
	a Action
	p payments.Payment
}

// issued is an action the service sends whoever owns its key (an expiry's
// void, or a cancel that found its payment authorized after all): the flow
// commits its begin on the payment (Begin) before it sends, and settles
// only after, so from then on the action holds the payment.
type issued struct {
	*inFlow
	reason string
}

// Begin queues the action's hold on the payment with its first move to the
// sent state; Settle then sees the payment held.
func (i issued) Begin(ctx context.Context, b *pgx.Batch, now time.Time) {
	i.p = i.s.pay.QueueStart(ctx, b, i.p, i.a.Kind, i.a.ID, i.reason, now)
}

// beforeExpiry settles a scheduled void that has nothing to do yet: it is
// early (the look is booked again for the expiry), another action holds the
// authorization (it waits for that one: awaitHolder), or the payment has ended
// (captured, or canceled, by another action: the void ends without a call,
// with a stored answer nobody asks for). done is false when the void is
// due.
func (s *Service) beforeExpiry(ctx context.Context, own *idempotency.Owner, a Action, p payments.Payment) (done bool, res idempotency.Result, err error) {
	now := s.d.Clock.Now()
	switch {
	case p.State == payments.StateAuthorized && p.AuthorizationExpiresAt != nil && now.Before(*p.AuthorizationExpiresAt):
		b := &pgx.Batch{}
		own.QueueRelease(b, idempotency.LookAt(*p.AuthorizationExpiresAt))
		return true, nil, own.Commit(ctx, b)
	case p.State == payments.StateAuthorized:
		return false, nil, nil
	case !p.State.Final():
		// Another action holds the authorization (a capture or a cancel at
		// the provider): it may end it, or hand it back, even after the
		// expiry (a declined capture, an abandoned one). Wait until the
		// payment has ended; only then is there nothing to void.
		since := now
		if p.AuthorizationExpiresAt != nil {
			since = *p.AuthorizationExpiresAt
		}
		return true, nil, s.awaitHolder(ctx, own, a, p, since)
	}
	res, err = s.end(ctx, own, a, p, StateCanceled, "", "nothing to void: the payment is "+string(p.State))
	return true, res, err
}

// awaitHolder books the next look of void a, which waits for another
// action holding its payment's authorization to end. If that action is
// left for a person, so is a, until that action ends: its settle wakes a
// (Engine.QueueWake), whoever ends it (the person, or a retry of its
// client). Otherwise a looks again (lookAgain). Waiting is never a failed
// attempt of the reconciler's: a void that waits, however long, is not
// left for a person for it (it was, after 20 looks: moneysim seed 5696).
func (s *Service) awaitHolder(ctx context.Context, own *idempotency.Owner, a Action, p payments.Payment, since time.Time) error {
	switch review, err := s.holderInReview(ctx, p, a); {
	case err != nil:
		return err
	case review:
		return s.reviewWithHolder(ctx, own, a)
	}
	return s.lookAgain(ctx, own, since)
}

// lookAgain releases own's key, which waits on another key (its payment's,
// or its holder's), with its next look booked: each look waits as long as
// the key has waited since `since`, from holderRecheck up to an hour, so a
// long wait costs few looks and the waiter follows within the hour. The
// look is decided (idempotency.LookAt): it restarts the count of attempts.
func (s *Service) lookAgain(ctx context.Context, own *idempotency.Owner, since time.Time) error {
	now := s.d.Clock.Now()
	wait := min(max(holderRecheck, now.Sub(since)), time.Hour)
	b := &pgx.Batch{}
	own.QueueRelease(b, idempotency.LookAt(now.Add(wait)))
	return own.Commit(ctx, b)
}

// waitsOnHolder is the reason a void is left for a person with the action
// holding its payment's authorization: the reason the holder's settle
// wakes it by (Engine.QueueWake).
func waitsOnHolder(paymentID string) string {
	return "the action holding the authorization of payment " + paymentID + " is left for a person"
}

// expiryScope is the key of the expiry void of the tenant's payment
// paymentID.
func expiryScope(tenant, paymentID string) idempotency.Scope {
	return idempotency.Scope{Tenant: tenant, Operation: OperationCancel, Key: expiryKey(paymentID)}
}

// reviewWithHolder leaves void a for a person with the action in review
// that holds its payment. That action may end between the look
// that found it in review and this mark, its wake finding nothing to wake
// yet: so the look is made again once the mark is committed, and if no
// action is in review any more, the void wakes itself. Either the holder's
// end commits after the mark (its wake sees the review), or before the
// second look (which sees it ended).
func (s *Service) reviewWithHolder(ctx context.Context, own *idempotency.Owner, a Action) error {
	if err := own.MarkForReview(ctx, waitsOnHolder(a.PaymentID)); err != nil {
		return err
	}
	p, err := s.pay.Get(ctx, own.Tenant, a.PaymentID)
	if err != nil {
		return err
	}
	switch still, err := s.holderInReview(ctx, p, a); {
	case err != nil:
		return err
	case still:
		return nil
	}
	b := &pgx.Batch{}
	s.d.Engine.QueueWake(b, own.Tenant, OperationCancel, waitsOnHolder(a.PaymentID), s.d.Clock.Now())
	return s.d.DB.SendBatch(ctx, b).Close()
}

// holderInReview reports whether the action holding p's authorization
// (p.HeldBy), if it is not a, has its key left for a person. Only the
// holder counts: another void that waits on it as a does, and is left for
// a person with it, must not keep a waiting once the holder has ended (two
// waiters would each keep the other in review for good). A hold taken
// before holders were named (migration 00023) names none: then every
// unended action on the payment but a counts, as it did.
func (s *Service) holderInReview(ctx context.Context, p payments.Payment, a Action) (bool, error) {
	var holders []Action
	kind, held := p.HeldAs()
	switch {
	case !held, p.HeldBy == a.ID:
		return false, nil
	case p.HeldBy != "":
		holders = []Action{{ID: p.HeldBy, Kind: kind}}
	default:
		others, err := unendedActions(ctx, s.d.DB, p.TenantID, a.PaymentID, a.ID)
		if err != nil {
			return false, err
		}
		holders = others
	}
	for _, o := range holders {
		rec, err := idempotency.LoadByResource(ctx, s.d.DB, idempotency.Resource{Type: kindOf(o.Kind).resource, ID: o.ID})
		if errors.Is(err, idempotency.ErrNotFound) {
			continue
		}
		if err != nil {
			return false, err
		}
		if rec.ManualReviewAt != nil {
			return true, nil
		}
	}
	return false, nil
}

// holderRecheck is how soon a void that waits on another key first looks
// again (lookAgain).
const holderRecheck = time.Minute

// end ends action a, which made no call, in `to`, with its key's final
// answer: a cancel of a payment that moved no money, or an expiry's void
// with nothing to void.
func (s *Service) end(ctx context.Context, own *idempotency.Owner, a Action, p payments.Payment, to State, declineCode, reason string) (idempotency.Result, error) {
	from, now := a.State, s.d.Clock.Now()
	a.State, a.UpdatedAt, a.DeclineCode = to, now, declineCode
	r := Result{Action: a, Payment: p}
	b := &pgx.Batch{}
	if err := own.QueueFinish(b, r); err != nil {
		return nil, err
	}
	set := statemachine.NonEmpty(statemachine.Column{Name: "decline_code", Value: declineCode})
	if err := machine.QueueMove(ctx, b, statemachine.Move[State]{ID: a.ID, From: from, To: to, Reason: reason, At: now, Set: set}); err != nil {
		return nil, err
	}
	if err := own.Commit(ctx, b); err != nil {
		return nil, err
	}
	return r, nil
}

// Send asks the provider to capture or void the payment's authorization,
// with the key derived from the action.
func (f *inFlow) Send(ctx context.Context) (providerflow.Answer, error) {
	s, a, p := f.s, f.a, f.p
	var (
		c   provider.Charge
		err error
	)
	if a.Kind == payments.ActionCapture {
		c, err = s.d.Provider.Capture(ctx, provider.CaptureRequest{
			IdempotencyKey: ProviderKey(a.ID), ChargeID: p.ProviderReference,
			AmountMinor: a.AmountMinor, Currency: a.Currency, PaymentID: p.ID,
		})
	} else {
		reason := a.Reason
		if reason == ReasonExpired {
			// Ask first: the provider may have let the authorization go
			// (or seen it captured) on its own.
			if c, err := s.d.Provider.GetCharge(ctx, p.ProviderReference); err == nil && c.Status != provider.StatusAuthorized {
				return s.answer(a, c), nil
			}
			reason = "abandoned"
		}
		c, err = s.d.Provider.Void(ctx, provider.VoidRequest{
			IdempotencyKey: ProviderKey(a.ID), ChargeID: p.ProviderReference, Reason: reason, PaymentID: p.ID,
		})
	}
	if err != nil {
		return providerflow.Answer{}, err
	}
	return s.answer(a, c), nil
}

// The decline codes this service reads in a provider's answer (the
// provider.Captures port's).
const (
	declineChargeCanceled        = "charge_canceled"
	declineChargeAlreadyCaptured = "charge_already_captured"
)

// answer is what the charge says of the action, as the flow reads it: the
// action succeeded when the charge is captured (a capture) or voided (a
// void); a charge that went the other way declines it.
func (s *Service) answer(a Action, c provider.Charge) providerflow.Answer {
	ans := providerflow.Answer{ID: c.ID, Status: c.Status, DeclineCode: c.DeclineCode, AmountMinor: c.AmountCapturedMinor}
	switch {
	case a.Kind == payments.ActionCapture && c.Status == provider.StatusCanceled:
		ans.Status, ans.DeclineCode = provider.StatusDeclined, declineChargeCanceled
	case a.Kind == payments.ActionVoid && c.Status == provider.StatusCanceled:
		ans.Status = provider.StatusSucceeded
	case a.Kind == payments.ActionVoid && c.Status == provider.StatusSucceeded:
		ans.Status, ans.DeclineCode = provider.StatusDeclined, declineChargeAlreadyCaptured
	}
	return ans
}

// Lookup asks the provider what became of the action: a capture's own
// record, if the provider holds one (a declined capture), else the charge
// as it now stands (read-after-write). A charge still authorized, with no
// record of the capture, never saw the action: provider.ErrNotFound, so
// that the flow sends it again (with the same key) or, for a refused one,
// knows that nothing moved.
func (f *inFlow) Lookup(ctx context.Context) (providerflow.Answer, error) {
	s, a, p := f.s, f.a, f.p
	if a.Kind == payments.ActionCapture {
		// A declined capture leaves the charge authorized, as one that
		// never arrived does: only the capture's own record tells them
		// apart (read as "not found", a declined capture would be sent
		// again once the provider forgot its key).
		c, err := s.d.Provider.LookupCapture(ctx, provider.ActionLookup{IdempotencyKey: ProviderKey(a.ID), ChargeID: p.ProviderReference})
		if !errors.Is(err, provider.ErrNotFound) {
			if err != nil {
				return providerflow.Answer{}, err
			}
			return s.answer(a, c), nil
		}
	}
	c, err := s.d.Provider.GetCharge(ctx, p.ProviderReference)
	switch {
	case errors.Is(err, provider.ErrNotFound):
		// The authorized charge itself is unknown: nobody can tell what
		// became of the action by asking again.
		return providerflow.Answer{}, fmt.Errorf("%w: charge %s: %v", provider.ErrAmbiguous, p.ProviderReference, err) //nolint:errorlint
	case err != nil:
		return providerflow.Answer{}, err
	case c.Status == provider.StatusAuthorized:
		return providerflow.Answer{}, fmt.Errorf("%w: the charge is still authorized", provider.ErrNotFound)
	}
	return s.answer(a, c), nil
}

// Settle is what an action writes with its move to `to`: for an end, the
// payment's move (captured, voided, or authorized again) and its event.
// The result is the action and its payment as they now stand.
func (f *inFlow) Settle(ctx context.Context, b *pgx.Batch, to State, ans providerflow.Answer, now time.Time) (idempotency.Result, error) {
	s, a, p := f.s, f.a, f.p
	if to != a.State {
		a.UpdatedAt = now
	}
	a.State = to
	var (
		end      payments.ActionEnd
		reason   string
		captured = a.AmountMinor
	)
	switch to {
	case StateSucceeded:
		a.ProviderReference = ans.ID
		end, reason = payments.Voided, "voided at the provider"
		if a.Kind == payments.ActionCapture {
			end, reason = payments.Captured, "captured at the provider"
			if ans.AmountMinor > 0 {
				captured = ans.AmountMinor // what the provider says it took
			}
		}
	case StateDeclined:
		a.ProviderReference, a.DeclineCode = ans.ID, ans.DeclineCode
		end, reason = payments.Released, string(a.Kind)+" declined: "+ans.DeclineCode
		switch {
		case a.Kind == payments.ActionCapture && ans.DeclineCode == declineChargeCanceled:
			end, reason = payments.Voided, "the provider had voided the authorization"
		case a.Kind == payments.ActionVoid && ans.DeclineCode == declineChargeAlreadyCaptured && ans.AmountMinor > 0:
			// Captured elsewhere (the provider's dashboard, a request
			// of ours that was processed after all): the money moved,
			// and the payment says so, with its event for the ledger.
			end, reason, captured = payments.Captured, "the provider had captured it", ans.AmountMinor
		}
	case StateCanceled:
		end, reason = payments.Released, string(a.Kind)+" abandoned: it never reached the provider"
	default:
		return Result{Action: a, Payment: p}, nil
	}
	if !p.HeldFor(a.Kind, a.ID) {
		// This action never held the authorization (its begin never
		// committed): whoever holds it, if anyone, moves the payment on.
		return Result{Action: a, Payment: p}, nil
	}
	p, err := s.pay.QueueEnd(ctx, b, p, a.Kind, a.ID, end, captured, reason, now)
	if err != nil {
		return nil, err
	}
	// The voids left for a person because this action held the
	// authorization then (awaitHolder: the service's expiry void, a
	// client's cancel) look again now: the payment is handed back or
	// ended, whoever ended this action (a person, or its client's retry).
	s.d.Engine.QueueWake(b, p.TenantID, OperationCancel, waitsOnHolder(p.ID), now)
	s.d.Log.Debug("payment action settled", "payment_id", p.ID, "tenant", p.TenantID, "action", a.Kind, "state", to)
	return Result{Action: a, Payment: p}, nil
}
