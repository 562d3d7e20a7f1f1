package payouts

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paymentsapi/paymentsapi/internal/claim"
	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/metrics"
	"github.com/paymentsapi/paymentsapi/internal/outbox"
	"github.com/paymentsapi/paymentsapi/internal/providerflow"
)

// Config holds the payout rules.
type Config struct {
	ProviderTimeout   time.Duration // bound of one provider call
	ProviderKeyWindow time.Duration // past it, a payout is only looked up, never sent again
	ProviderLookupLag time.Duration // how long a lookup may miss a new payout
	RefusalRecheck    time.Duration // how long after a refusal the reconciler looks anyway
}

// Deps are the collaborators of a Service.
type Deps struct {
	DB       *pgxpool.Pool
	Engine   *idempotency.Engine
	Provider Port
	Clock    clock.Clock
	Log      *slog.Logger
	Metrics  *metrics.Metrics
}

// Service creates payouts idempotently and reads them back; as the
// engine's Operation it takes a payout whose key it owns to an answer.
type Service struct {
	d    Deps
	flow *providerflow.Flow[State]
}

var _ idempotency.Operation = (*Service)(nil)

// NewService returns a Service.
func NewService(d Deps, cfg Config) *Service {
	return &Service{d: d, flow: &providerflow.Flow[State]{
		Machine: machine,
		States: providerflow.States[State]{
			Sent: StateProviderRequestSent, Succeeded: StateSucceeded, Declined: StateDeclined,
			Retryable: StateFailedRetryable, Unknown: StateUnknown,
		},
		Clock: d.Clock, KeyWindow: cfg.ProviderKeyWindow,
		Timeout: cfg.ProviderTimeout, Metrics: d.Metrics, SendOp: "payout", LookupOp: "payout_lookup",
		LookupLag: cfg.ProviderLookupLag, RefusalGrace: cfg.RefusalRecheck, Log: d.Log,
	}}
}

// Name is the operation's name in every key's scope.
func (s *Service) Name() string { return OperationCreate }

// Create runs cmd under the tenant's key. The first request claims the key
// and, in the claim's transaction, creates the payout already sent, records
// its creation and PayoutCreated; it then takes the payout through the
// provider. Retries are answered by the engine: the stored answer, 409
// while the first is in flight, 422 for another command under the key.
func (s *Service) Create(ctx context.Context, tenant, key string, cmd Command, wait time.Duration) (idempotency.Reply, error) {
	now := s.d.Clock.Now()
	fp := cmd.Fingerprint()
	p := Payout{
		ID: deriveID(tenant, key, fp), TenantID: tenant, AccountID: cmd.AccountID, AmountMinor: cmd.AmountMinor,
		Currency: cmd.Currency, Destination: cmd.Destination,
		State: s.flow.States.Sent, FirstSentAt: &now, LastSentAt: &now, CreatedAt: now, UpdatedAt: now,
	}
	event, err := outbox.NewEvent(ctx, EventCreated, ResourceType, p.ID, p.eventPayload(), now)
	if err != nil {
		return idempotency.Reply{}, err
	}
	// SendOnClaim records the payout's creation and its move to sent, and
	// books the look the reconciler makes if this request dies before the
	// provider answers.
	sentAudit, look, err := s.flow.SendOnClaim(ctx, p.ID, "request accepted", now)
	if err != nil {
		return idempotency.Reply{}, err
	}
	return s.d.Engine.Do(ctx, s, idempotency.Request{
		Scope:       idempotency.Scope{Tenant: tenant, Operation: OperationCreate, Key: key},
		Fingerprint: fp,
		Resource:    idempotency.Resource{Type: ResourceType, ID: p.ID},
		Create: func(b *claim.Batch) {
			queueInsert(b, p)
			b.Queue(outbox.IfClaimed(event))
			b.Queue(sentAudit)
		},
		Wait:      wait,
		FirstLook: look,
		// A refused claim whose payout exists (the key expired, the payout
		// did not) is answered IDEMPOTENCY_KEY_EXPIRED naming the payout.
		Exists: idempotency.RowExists(s.d.DB, `SELECT FROM payouts WHERE id = $1 AND tenant_id = $2`, p.ID, tenant),
	})
}

// Resume takes the payout of a key the caller owns from its recorded state
// to a result.
func (s *Service) Resume(ctx context.Context, own *idempotency.Owner) (idempotency.Result, error) {
	p, err := getPayout(ctx, s.d.DB, own.Tenant, own.Resource.ID)
	if err != nil {
		return nil, err
	}
	return s.flow.Resume(ctx, own, providerflow.Subject[State]{
		ID: p.ID, State: p.State, CreatedAt: p.CreatedAt, UpdatedAt: p.UpdatedAt, AmountMinor: p.AmountMinor,
		FirstSentAt: p.FirstSentAt, LastSentAt: p.LastSentAt, Op: inFlow{s: s, p: p},
	})
}

// Get returns the tenant's payout id, or ErrNotFound.
func (s *Service) Get(ctx context.Context, tenant, id string) (Payout, error) {
	return getPayout(ctx, s.d.DB, tenant, id)
}

// inFlow is payout p as the provider flow takes it (providerflow.Operation).
type inFlow struct {
	s *Service
	p Payout
}

// Send asks the provider to pay out, with the key derived from the payout.
func (f inFlow) Send(ctx context.Context) (providerflow.Answer, error) {
	p := f.p
	return answer(f.s.d.Provider.Payout(ctx, ProviderRequest{
		IdempotencyKey: ProviderKey(p.ID), PayoutID: p.ID, AmountMinor: p.AmountMinor, Currency: p.Currency,
		Destination: p.Destination,
	}))
}

// Lookup asks the provider what became of the payout's key.
func (f inFlow) Lookup(ctx context.Context) (providerflow.Answer, error) {
	return answer(f.s.d.Provider.LookupPayout(ctx, ProviderKey(f.p.ID)))
}

func answer(t ProviderAnswer, err error) (providerflow.Answer, error) {
	return providerflow.Answer{ID: t.ID, Status: t.Status, DeclineCode: t.DeclineCode, AmountMinor: t.AmountMinor}, err
}

// Settle is what a payout writes with its move to `to`: its event.
func (f inFlow) Settle(ctx context.Context, b *pgx.Batch, to State, a providerflow.Answer, now time.Time) (idempotency.Result, error) {
	p := f.p
	if to != p.State {
		p.UpdatedAt = now // only a move writes updated_at: show what the database holds
	}
	p.State = to
	var eventType string
	switch to {
	case StateSucceeded:
		p.ProviderReference, eventType = a.ID, EventSucceeded
	case StateDeclined:
		p.ProviderReference, p.DeclineCode, eventType = a.ID, a.DeclineCode, EventDeclined
	}
	if eventType != "" {
		event, err := outbox.NewEvent(ctx, eventType, ResourceType, p.ID, p.eventPayload(), now)
		if err != nil {
			return nil, err
		}
		outbox.Queue(b, event)
	}
	return p, nil
}
