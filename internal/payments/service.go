package payments

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
	"github.com/paymentsapi/paymentsapi/internal/outbox"
	"github.com/paymentsapi/paymentsapi/internal/provider"
	"github.com/paymentsapi/paymentsapi/internal/providerflow"
	"github.com/paymentsapi/paymentsapi/internal/refuse"
	"github.com/paymentsapi/paymentsapi/internal/validate"
)

// Config holds the payment rules of the Service.
type Config struct {
	// ProviderTimeout bounds one provider call (PROVIDER_TIMEOUT).
	ProviderTimeout time.Duration
	// ProviderKeyWindow is how long the provider remembers its idempotency
	// keys. Past it, a payment is only ever looked up, never sent again.
	ProviderKeyWindow time.Duration
	// ProviderLookupLag is how long after a create the provider's lookup
	// may still miss it: a "not found" is certain only that long after the
	// latest request that may have reached the provider.
	ProviderLookupLag time.Duration
	// RefusalRecheck is how long after a refusal the reconciler looks the
	// payment up anyway (default one minute, at least ProviderLookupLag).
	RefusalRecheck time.Duration
	// AbandonAfter is how long after its claim a payment that moved no
	// money (never sent, or refused) waits for its client's retry before
	// the reconciler cancels it (IDEMPOTENCY_TTL, the replay window).
	AbandonAfter time.Duration
	// PublicURL is the base URL customers reach the service at
	// (PUBLIC_URL): the provider sends a customer back from an
	// authentication to the payment's return route under it.
	PublicURL string
	// AllowHTTPReturnURL lets a command's returnUrl be plain http (dev
	// mode); otherwise it must be https.
	AllowHTTPReturnURL bool
	// Hooks are failpoints for tests; the zero value does nothing.
	Hooks Hooks
}

// Hooks are failpoints at the boundaries of the state machine, for tests
// that prove recovery. Each runs after the named step has committed; an error
// stops the request right there, as a crash would: nothing more is written,
// and the key keeps its lease until it runs out.
type Hooks struct {
	AfterClaim          func(ctx context.Context, paymentID string) error
	AfterRequestSent    func(ctx context.Context, paymentID string) error
	AfterProviderAnswer func(ctx context.Context, paymentID string) error
}

// run calls hook if it is set.
func run(ctx context.Context, hook func(context.Context, string) error, paymentID string) error {
	if hook == nil {
		return nil
	}
	if err := hook(ctx, paymentID); err != nil {
		return fmt.Errorf("%w: %w", idempotency.ErrCrashed, err)
	}
	return nil
}

// Deps are the collaborators of a Service.
type Deps struct {
	DB       *pgxpool.Pool
	Engine   *idempotency.Engine
	Provider provider.Charges
	Clock    clock.Clock
	Log      *slog.Logger
	Metrics  *metrics.Metrics
}

// Service creates payments idempotently, reads them back, and (as the
// engine's Operation) takes a payment whose key it owns to an answer.
type Service struct {
	d   Deps
	cfg Config
	// flow takes an automatic payment through the provider, manual one
	// that only authorizes (its success is StateAuthorized).
	flow, manual *providerflow.Flow[State]
	// onAuthorized are the hooks other modules declare (WhenAuthorized),
	// added once every operation is built (operation.Build).
	onAuthorized []AuthorizedHook
	// auth is the authenticate_payment operation, which settles the
	// payments that wait for their customer (AuthenticationModule sets it
	// when it is built); nil: none is registered.
	auth *Authentications
}

var _ idempotency.Operation = (*Service)(nil)

// NewService returns a Service. The rules between the settings (a lease
// longer than the provider timeout) are checked once, at start-up, by
// package config.
func NewService(d Deps, cfg Config) *Service {
	s := &Service{d: d, cfg: cfg}
	s.flow = &providerflow.Flow[State]{
		Machine: machine,
		States: providerflow.States[State]{
			Sent: StateProviderRequestSent, Succeeded: StateCompleted, Declined: StateDeclined,
			Retryable: StateFailedRetryable, Unknown: StateUnknown, Canceled: StateCanceled,
			CancelRequested: StateCancelRequested, RequiresAction: StateRequiresAction,
		},
		Clock: d.Clock, KeyWindow: cfg.ProviderKeyWindow,
		Timeout: cfg.ProviderTimeout, Metrics: d.Metrics, SendOp: "charge", LookupOp: "lookup",
		LookupLag: cfg.ProviderLookupLag, RefusalGrace: cfg.RefusalRecheck, AbandonAfter: cfg.AbandonAfter,
		Hooks: providerflow.Hooks{AfterSent: cfg.Hooks.AfterRequestSent, AfterAnswer: cfg.Hooks.AfterProviderAnswer},
		Log:   d.Log,
	}
	manual := *s.flow
	manual.States.Succeeded = StateAuthorized
	s.manual = &manual
	return s
}

// flowOf is the flow that takes p through the provider.
func (s *Service) flowOf(p Payment) *providerflow.Flow[State] {
	if p.Command.CaptureMethod == CaptureManual {
		return s.manual
	}
	return s.flow
}

// Name is the operation's name in every key's scope.
func (s *Service) Name() string { return OperationCreate }

// Create runs the create-payment command cmd under the tenant's key. The
// first request claims the key and creates the payment and its
// PaymentCreated event in one transaction, then takes the payment through
// the provider. A retry is answered from what the key's record says; if the
// original is in flight it may wait up to wait for it to finish.
func (s *Service) Create(ctx context.Context, tenant, key string, cmd Command, wait time.Duration) (idempotency.Reply, error) {
	if cmd.CaptureMethod == "" {
		cmd.CaptureMethod = CaptureAutomatic // a Command built in Go rather than by Validate
	}
	if strings.HasPrefix(cmd.ReturnURL, "http:") && !s.cfg.AllowHTTPReturnURL {
		var errs validate.Collector
		errs.Add("returnUrl", "must be an https URL (plain http is taken in dev mode only)")
		return idempotency.Reply{}, errs.Err()
	}
	// What the provider would refuse as it stands (an amount its currency
	// rules refuse, a payment method it does not have) is refused before
	// the claim of a new key, as an invalid field is: nothing is stored.
	scope := idempotency.Scope{Tenant: tenant, Operation: OperationCreate, Key: key}
	if err := s.d.Engine.RefuseNew(ctx, s, scope, provider.Check(s.d.Provider, provider.Proposal{
		AmountMinor: cmd.AmountMinor, Currency: cmd.Currency, PaymentMethod: cmd.PaymentMethod,
	})); err != nil {
		return idempotency.Reply{}, err
	}
	fp := cmd.Fingerprint()
	// The holder of the merchant reference may be declined (freeing it)
	// between the conflict and the look: then the claim, undone, is tried
	// again.
	for range 3 {
		now := s.d.Clock.Now()
		p := Payment{ID: deriveID(tenant, key, fp), TenantID: tenant, Command: cmd, CreatedAt: now, UpdatedAt: now}
		// The claim's transaction creates the payment already sent
		// (SendOnClaim records its creation and that move): the request
		// goes to the provider right after it commits.
		flow := s.flowOf(p)
		p.State, p.FirstSentAt, p.LastSentAt = flow.States.Sent, &now, &now
		event, err := outbox.NewEvent(ctx, EventCreated, ResourceType, p.ID, p.eventPayload(), p.CreatedAt)
		if err != nil {
			return idempotency.Reply{}, err
		}
		sentAudit, look, err := flow.SendOnClaim(ctx, p.ID, "request accepted", now)
		if err != nil {
			return idempotency.Reply{}, err
		}
		reply, err := s.d.Engine.Do(ctx, s, idempotency.Request{
			Scope:       scope,
			Fingerprint: fp,
			Resource:    p.Resource(),
			Create: func(b *claim.Batch) {
				queueInsertPayment(b, p)
				b.Queue(outbox.IfClaimed(event))
				b.Queue(sentAudit) // its creation and its move to sent, recorded
			},
			Created:   p,
			Wait:      wait,
			FirstLook: look,
			Exists:    idempotency.RowExists(s.d.DB, `SELECT FROM payments WHERE id = $1 AND tenant_id = $2`, p.ID, tenant),
		})
		if holder, held := refuse.Is(err, refuseReferenceHeld); held {
			if holder == "" {
				continue
			}
			return idempotency.Reply{}, &DuplicateReferenceError{PaymentID: holder}
		}
		return reply, err
	}
	return idempotency.Reply{}, ErrReferenceContended
}

// Resume takes the payment of a key the caller owns from its recorded state
// to a result: for the first request, a takeover and the reconciler alike.
func (s *Service) Resume(ctx context.Context, own *idempotency.Owner) (idempotency.Result, error) {
	if own.First {
		if err := run(ctx, s.cfg.Hooks.AfterClaim, own.Resource.ID); err != nil {
			return nil, err
		}
	}
	p, fresh := own.Created.(Payment) // the first request: as the claim wrote it
	if !fresh {
		var err error
		if p, err = getPayment(ctx, s.d.DB, own.Tenant, own.Resource.ID); err != nil {
			return nil, err
		}
	}
	if !own.First {
		s.d.Log.InfoContext(ctx, "resuming payment", "payment_id", p.ID, "tenant", p.TenantID,
			"state", p.State, "fencing_token", own.Token, "reconciler", own.Recovering)
	}
	return s.flowOf(p).Resume(ctx, own, providerflow.Subject[State]{
		ID: p.ID, State: p.State, CreatedAt: p.CreatedAt, UpdatedAt: p.UpdatedAt, AmountMinor: p.Command.AmountMinor,
		FirstSentAt: p.FirstSentAt, LastSentAt: p.LastSentAt, Op: inFlow{s, p},
	})
}

// Settle is what a payment writes with its move to `to`: the event of a
// final outcome; the result is the payment as it now stands.
func (f inFlow) Settle(ctx context.Context, b *pgx.Batch, to State, a providerflow.Answer, now time.Time) (idempotency.Result, error) {
	s, p := f.s, f.p
	from := p.State
	if to != p.State {
		p.UpdatedAt = now // only a move writes updated_at: show what the database holds
	}
	p.State = to
	var eventType string
	switch to {
	case StateCompleted:
		p.ProviderReference, eventType = a.ID, EventSucceeded
	case StateDeclined:
		p.ProviderReference, p.DeclineCode, eventType = a.ID, a.DeclineCode, EventDeclined
	case StateAuthorized:
		p.ProviderReference, eventType = a.ID, EventAuthorized
		var err error
		if p, err = s.authorize(ctx, b, p, now); err != nil {
			return nil, err
		}
	case StateCanceled:
		eventType = EventCanceled
	case StateRequiresAction:
		p.ProviderReference, p.NextActionURL, eventType = a.ID, a.NextActionURL, EventRequiresAction
		if s.auth == nil {
			return nil, fmt.Errorf("payment %s waits for its customer to authenticate, and no operation settles it: "+
				"register payments.AuthenticationModule", p.ID)
		}
		queueNextAction(b, p.ID, p.NextActionURL)
		s.auth.schedule(b, p, now)
	}
	if err := queueEvent(ctx, b, eventType, p, now); err != nil {
		return nil, err
	}
	// Debug: the request's own line (payment id, status) or the
	// reconciler's says the outcome; one line per payment is the hot path's.
	s.d.Log.Debug("payment settled", "payment_id", p.ID, "tenant", p.TenantID, "from", from, "to", to)
	return p, nil
}

// authorize queues p's authorization expiry with its move to
// StateAuthorized, and then what the hooks of the move queue. The hooks say
// when it expires: the operations on authorizations keep their lifetime
// (AUTHORIZATION_TTL) and void what outlives it.
func (s *Service) authorize(ctx context.Context, b *pgx.Batch, p Payment, now time.Time) (Payment, error) {
	hooked := &pgx.Batch{}
	for _, hook := range s.onAuthorized {
		var err error
		if p, err = hook(ctx, hooked, p, now); err != nil {
			return Payment{}, err
		}
	}
	if p.AuthorizationExpiresAt == nil {
		return Payment{}, fmt.Errorf("payment %s is authorized, and no operation says when its authorization expires: "+
			"register the operations on authorizations (payments.WhenAuthorized)", p.ID)
	}
	queueAuthorized(b, p.ID, *p.AuthorizationExpiresAt)
	b.QueuedQueries = append(b.QueuedQueries, hooked.QueuedQueries...)
	return p, nil
}

// queueEvent adds to b the event eventType about p as it now stands (none
// when eventType is empty), in the trace of ctx.
func queueEvent(ctx context.Context, b *pgx.Batch, eventType string, p Payment, now time.Time) error {
	if eventType == "" {
		return nil
	}
	event, err := outbox.NewEvent(ctx, eventType, ResourceType, p.ID, p.eventPayload(), now)
	if err != nil {
		return err
	}
	outbox.Queue(b, event)
	return nil
}

// Get returns the tenant's payment, or ErrNotFound.
func (s *Service) Get(ctx context.Context, tenant, id string) (Payment, error) {
	return getPayment(ctx, s.d.DB, tenant, id)
}

// List returns a page of the tenant's payments, newest first.
func (s *Service) List(ctx context.Context, tenant string, q ListQuery) (Page, error) {
	// A reference is compared as it is stored, whoever typed it.
	q.MerchantReference = normalReference(q.MerchantReference)
	return listPayments(ctx, s.d.DB, tenant, q)
}

// Created answers when the tenant's payment id was created, or found false
// if the tenant has no such payment: how far back the event log reads for
// a payment's events (eventlog.Subject).
func (s *Service) Created(ctx context.Context, tenant, id string) (at time.Time, found bool, err error) {
	p, err := s.Get(ctx, tenant, id)
	if errors.Is(err, ErrNotFound) {
		return time.Time{}, false, nil
	}
	return p.CreatedAt, err == nil, err
}
