package refunds

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paymentsapi/paymentsapi/internal/claim"
	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/metrics"
	"github.com/paymentsapi/paymentsapi/internal/outbox"
	"github.com/paymentsapi/paymentsapi/internal/payments"
	"github.com/paymentsapi/paymentsapi/internal/provider"
	"github.com/paymentsapi/paymentsapi/internal/providerflow"
)

// Config holds the refund rules.
type Config struct {
	ProviderTimeout   time.Duration // bound of one provider call
	ProviderKeyWindow time.Duration // past it, a refund is only looked up, never sent again
	ProviderLookupLag time.Duration // how long a lookup may miss a new refund
	RefusalRecheck    time.Duration // how long after a refusal the reconciler looks anyway
}

// Deps are the collaborators of a Service.
type Deps struct {
	DB       *pgxpool.Pool
	Engine   *idempotency.Engine
	Provider provider.Refunds
	Clock    clock.Clock
	Log      *slog.Logger
	Metrics  *metrics.Metrics
}

// Service creates refunds idempotently and reads them back; as the engine's
// Operation it takes a refund whose key it owns to an answer.
type Service struct {
	d        Deps
	payments payments.Port
	flow     *providerflow.Flow[State]
}

var _ idempotency.Operation = (*Service)(nil)

// NewService returns a Service acting on the payments through pay.
func NewService(d Deps, pay payments.Port, cfg Config) *Service {
	return &Service{d: d, payments: pay, flow: &providerflow.Flow[State]{
		Machine: machine,
		States: providerflow.States[State]{
			Sent: StateProviderRequestSent, Succeeded: StateSucceeded, Declined: StateDeclined,
			Retryable: StateFailedRetryable, Unknown: StateUnknown,
		},
		Clock: d.Clock, KeyWindow: cfg.ProviderKeyWindow,
		Timeout: cfg.ProviderTimeout, Metrics: d.Metrics, SendOp: "refund", LookupOp: "refund_lookup",
		LookupLag: cfg.ProviderLookupLag, RefusalGrace: cfg.RefusalRecheck, Log: d.Log,
	}}
}

// Name is the operation's name in every key's scope.
func (s *Service) Name() string { return OperationCreate }

// Prepare reads the tenant's payment and validates req against it: the
// amount is in the payment's currency.
func (s *Service) Prepare(ctx context.Context, tenant, paymentID string, req CreateRequest) (Command, error) {
	p, err := s.payment(ctx, tenant, paymentID)
	if err != nil {
		return Command{}, err
	}
	cmd, err := req.Validate(p.ID, p.Command.Currency)
	cmd.AccountID = p.Command.AccountID
	return cmd, err
}

// Create runs cmd (from Prepare) under the tenant's key: the first request
// claims the key and creates the refund (if the payment may be refunded by
// that much) in one transaction, then takes it through the provider;
// retries are answered by the engine.
func (s *Service) Create(ctx context.Context, tenant, key string, cmd Command, wait time.Duration) (idempotency.Reply, error) {
	// An amount the provider's currency rules refuse (a refund follows the
	// charge's rules) is refused before the claim of a new key: nothing is
	// stored.
	scope := idempotency.Scope{Tenant: tenant, Operation: OperationCreate, Key: key}
	unsendable := provider.Check(s.d.Provider, provider.Proposal{AmountMinor: cmd.AmountMinor, Currency: cmd.Currency})
	if err := s.d.Engine.RefuseNew(ctx, s, scope, unsendable); err != nil {
		return idempotency.Reply{}, err
	}
	now := s.d.Clock.Now()
	fp := cmd.Fingerprint()
	// The claim's transaction creates the refund already sent (SendOnClaim
	// records its creation and that move): the request goes to the
	// provider right after it commits.
	r := Refund{
		ID: deriveID(tenant, key, fp), TenantID: tenant, PaymentID: cmd.PaymentID, AccountID: cmd.AccountID,
		AmountMinor: cmd.AmountMinor, Currency: cmd.Currency, Reason: cmd.Reason,
		State: s.flow.States.Sent, FirstSentAt: &now, LastSentAt: &now, CreatedAt: now, UpdatedAt: now,
	}
	event, err := outbox.NewEvent(ctx, EventCreated, ResourceType, r.ID, r.eventPayload(), r.CreatedAt)
	if err != nil {
		return idempotency.Reply{}, err
	}
	sentAudit, look, err := s.flow.SendOnClaim(ctx, r.ID, "request accepted", now)
	if err != nil {
		return idempotency.Reply{}, err
	}
	reply, err := s.d.Engine.Do(ctx, s, idempotency.Request{
		Scope:       scope,
		Fingerprint: fp,
		Resource:    idempotency.Resource{Type: ResourceType, ID: r.ID},
		Create: func(b *claim.Batch) {
			queueInsert(b, s.payments, r)
			b.Queue(outbox.IfClaimed(event))
			b.Queue(sentAudit) // its creation and its move to sent, recorded
		},
		Wait:      wait,
		FirstLook: look,
		Exists:    idempotency.RowExists(s.d.DB, `SELECT FROM refunds WHERE id = $1 AND tenant_id = $2`, r.ID, tenant),
	})
	return reply, refusal(err, r.Currency)
}

// Resume takes the refund of a key the caller owns from its recorded state
// to a result.
func (s *Service) Resume(ctx context.Context, own *idempotency.Owner) (idempotency.Result, error) {
	r, err := getRefund(ctx, s.d.DB, own.Tenant, own.Resource.ID)
	if err != nil {
		return nil, err
	}
	p, err := s.payment(ctx, own.Tenant, r.PaymentID)
	if err != nil {
		return nil, err
	}
	return s.flow.Resume(ctx, own, providerflow.Subject[State]{
		ID: r.ID, State: r.State, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, AmountMinor: r.AmountMinor,
		FirstSentAt: r.FirstSentAt, LastSentAt: r.LastSentAt, Op: inFlow{s: s, r: r, chargeID: p.ProviderReference},
	})
}

// inFlow is refund r as the provider flow takes it: the flow's
// providerflow.Operation, whose Send refunds its payment's charge
// (chargeID).
type inFlow struct {
	s        *Service
	r        Refund
	chargeID string
}

// Send asks the provider to refund the charge, with the key derived from
// the refund.
func (f inFlow) Send(ctx context.Context) (providerflow.Answer, error) {
	r := f.r
	return answer(f.s.d.Provider.Refund(ctx, provider.RefundRequest{
		IdempotencyKey: ProviderKey(r.ID), ChargeID: f.chargeID, AmountMinor: r.AmountMinor,
		Currency: r.Currency, Reason: r.Reason, RefundID: r.ID,
	}))
}

// Lookup asks the provider what became of the refund's key.
func (f inFlow) Lookup(ctx context.Context) (providerflow.Answer, error) {
	return answer(f.s.d.Provider.LookupRefund(ctx, provider.RefundLookup{IdempotencyKey: ProviderKey(f.r.ID), ChargeID: f.chargeID}))
}

func answer(res provider.Refund, err error) (providerflow.Answer, error) {
	return providerflow.Answer{ID: res.ID, Status: res.Status, DeclineCode: res.DeclineCode, AmountMinor: res.AmountMinor}, err
}

// Settle is what a refund writes with its move to `to`: its event, and for
// a success the payment's refunded amount.
func (f inFlow) Settle(ctx context.Context, b *pgx.Batch, to State, a providerflow.Answer, now time.Time) (idempotency.Result, error) {
	r := f.r
	if to != r.State {
		r.UpdatedAt = now // only a move writes updated_at: show what the database holds
	}
	r.State = to
	var eventType string
	switch to {
	case StateSucceeded:
		r.ProviderReference, eventType = a.ID, EventSucceeded
		f.s.payments.QueueRefunded(b, r.PaymentID, r.AmountMinor)
	case StateDeclined:
		r.ProviderReference, r.DeclineCode, eventType = a.ID, a.DeclineCode, EventDeclined
	}
	if eventType != "" {
		event, err := outbox.NewEvent(ctx, eventType, ResourceType, r.ID, r.eventPayload(), now)
		if err != nil {
			return nil, err
		}
		outbox.Queue(b, event)
	}
	return r, nil
}

// Get returns the tenant's refund id of payment paymentID, or ErrNotFound.
func (s *Service) Get(ctx context.Context, tenant, paymentID, id string) (Refund, error) {
	r, err := getRefund(ctx, s.d.DB, tenant, id)
	if err == nil && r.PaymentID != paymentID {
		return Refund{}, ErrNotFound
	}
	return r, err
}

// List returns the refunds of the tenant's payment, oldest first.
func (s *Service) List(ctx context.Context, tenant, paymentID string) ([]Refund, error) {
	if _, err := s.payment(ctx, tenant, paymentID); err != nil {
		return nil, err
	}
	return listRefunds(ctx, s.d.DB, tenant, paymentID)
}

// payment returns the tenant's payment id, or ErrPaymentNotFound.
func (s *Service) payment(ctx context.Context, tenant, id string) (payments.Payment, error) {
	p, err := s.payments.Get(ctx, tenant, id)
	if errors.Is(err, payments.ErrNotFound) {
		return payments.Payment{}, ErrPaymentNotFound
	}
	return p, err
}
