package payments

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/ids"
	"github.com/paymentsapi/paymentsapi/internal/metrics"
	"github.com/paymentsapi/paymentsapi/internal/outbox"
	"github.com/paymentsapi/paymentsapi/internal/provider"
	"github.com/paymentsapi/paymentsapi/internal/statemachine"
)

// Config holds the payment rules of the Service.
type Config struct {
	// ProviderTimeout bounds one provider call (PROVIDER_TIMEOUT).
	ProviderTimeout time.Duration
	// ProviderKeyWindow is how long the provider remembers its idempotency
	// keys. Past it, a payment is only ever looked up, never sent again.
	ProviderKeyWindow time.Duration
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
	return hook(ctx, paymentID)
}

// Deps are the collaborators of a Service.
type Deps struct {
	DB       *pgxpool.Pool
	Engine   *idempotency.Engine
	Provider provider.Provider
	Clock    clock.Clock
	Log      *slog.Logger
	Metrics  *metrics.Metrics
}

// Service creates payments idempotently, reads them back, and (as the
// engine's Operation) takes a payment whose key it owns to an answer.
type Service struct {
	db       *pgxpool.Pool
	engine   *idempotency.Engine
	provider provider.Provider
	clock    clock.Clock
	cfg      Config
	log      *slog.Logger
	metrics  *metrics.Metrics
}

var _ idempotency.Operation = (*Service)(nil)

// NewService returns a Service. The rules between the settings (a lease
// longer than the provider timeout) are checked once, at start-up, by
// package config.
func NewService(d Deps, cfg Config) *Service {
	return &Service{db: d.DB, engine: d.Engine, provider: d.Provider, clock: d.Clock, cfg: cfg, log: d.Log, metrics: d.Metrics}
}

// Name is the operation's name in every key's scope.
func (s *Service) Name() string { return OperationCreate }

// Create runs the create-payment command cmd under the tenant's key. The
// first request claims the key and creates the payment and its
// PaymentCreated event in one transaction, then takes the payment through
// the provider. A retry is answered from what the key's record says; if the
// original is in flight it may wait up to wait for it to finish.
func (s *Service) Create(ctx context.Context, tenant, key string, cmd Command, wait time.Duration) (idempotency.Reply, error) {
	now := s.clock.Now()
	p := Payment{
		ID: ids.NewPaymentID(), TenantID: tenant, Command: cmd,
		State: machine.Initial(), CreatedAt: now, UpdatedAt: now,
	}
	return s.engine.Do(ctx, s, idempotency.Request{
		Scope:       idempotency.Scope{Tenant: tenant, Operation: OperationCreate, Key: key},
		Fingerprint: cmd.Fingerprint(),
		Resource:    p.Resource(),
		Create:      func(ctx context.Context, tx pgx.Tx) error { return s.create(ctx, tx, p) },
		Wait:        wait,
	})
}

// create writes, in the claim's transaction, the payment in RECEIVED, its
// first transition and the PaymentCreated event; or refuses with
// *DuplicateReferenceError when a live payment holds its merchant reference.
func (s *Service) create(ctx context.Context, tx pgx.Tx, p Payment) error {
	event, err := outbox.NewEvent(outbox.TypePaymentCreated, ResourceType, p.ID, p.eventPayload(), p.CreatedAt)
	if err != nil {
		return err
	}
	// The holder of the reference may be declined (freeing it) between the
	// conflict and the look: then the insert is tried again.
	for range 3 {
		inserted, holder, err := insertPayment(ctx, tx, p)
		if err != nil {
			return err
		}
		if !inserted && holder != "" {
			return &DuplicateReferenceError{PaymentID: holder}
		}
		if inserted {
			b := &pgx.Batch{}
			machine.QueueCreated(b, p.ID, "request accepted", p.CreatedAt)
			outbox.Queue(b, event)
			return tx.SendBatch(ctx, b).Close()
		}
	}
	return fmt.Errorf("merchant reference of payment %s kept changing hands", p.ID)
}

// Resume takes the payment of a key the caller owns from its recorded state
// to a result: for the first request, a takeover and the reconciler alike.
func (s *Service) Resume(ctx context.Context, own *idempotency.Owner) (idempotency.Result, error) {
	if own.First {
		if err := run(ctx, s.cfg.Hooks.AfterClaim, own.Resource.ID); err != nil {
			return nil, err
		}
	}
	p, err := getPayment(ctx, s.db, own.Tenant, own.Resource.ID)
	if err != nil {
		return nil, err
	}
	log := s.log.With("payment_id", p.ID, "tenant", p.TenantID)
	if !own.First {
		log.InfoContext(ctx, "resuming payment", "state", p.State, "fencing_token", own.Token, "reconciler", own.Recovering)
	}
	switch p.State {
	case StateReceived, StateFailedRetryable:
		return s.send(ctx, own, p)
	case StateProviderRequestSent, StateUnknown:
		return s.recoverOutcome(ctx, own, p)
	default:
		// A final state is committed together with its stored answer, so a
		// key without an answer never points at a final payment.
		return nil, fmt.Errorf("payment %s is %s but its key has no stored answer", p.ID, p.State)
	}
}

// send records PROVIDER_REQUEST_SENT, commits, and only then calls the
// provider, with the key derived from the payment. A payment reaches send
// only from RECEIVED or FAILED_RETRYABLE: no earlier call for it can still be
// on its way to the provider, and the move, fenced, makes this owner the only
// caller. So a refusal of this call means no money moved.
func (s *Service) send(ctx context.Context, own *idempotency.Owner, p Payment) (idempotency.Result, error) {
	if err := s.move(ctx, own, &p, StateProviderRequestSent, "sending charge to provider"); err != nil {
		return nil, err
	}
	return s.chargeAndSettle(ctx, own, p, true)
}

// chargeAndSettle calls the provider for a payment recorded as
// PROVIDER_REQUEST_SENT and commits what it said. soleCall says whether this
// call is the only one that can have reached the provider for the payment:
// only then does a refusal prove that no money moved.
func (s *Service) chargeAndSettle(ctx context.Context, own *idempotency.Owner, p Payment, soleCall bool) (idempotency.Result, error) {
	if err := run(ctx, s.cfg.Hooks.AfterRequestSent, p.ID); err != nil {
		return nil, err
	}
	charge, err := s.charge(ctx, p)
	if err := run(ctx, s.cfg.Hooks.AfterProviderAnswer, p.ID); err != nil {
		return nil, err
	}
	if errors.Is(err, provider.ErrUnavailable) && !soleCall {
		// An earlier call (a dead owner's, or one whose answer was lost)
		// may still reach the provider: this refusal proves nothing.
		err = fmt.Errorf("%w: refused, but an earlier call may still be processed: %v", provider.ErrUnknownOutcome, err) //nolint:errorlint
	}
	return s.settle(ctx, own, p, charge, err)
}

// recoverOutcome asks the provider what became of a request that may have
// been sent, and never sends it again unless the provider is certain it
// never saw the key (and still remembers keys as old as this payment).
func (s *Service) recoverOutcome(ctx context.Context, own *idempotency.Owner, p Payment) (idempotency.Result, error) {
	charge, err := s.lookup(ctx, p)
	switch {
	case err == nil:
		if err := run(ctx, s.cfg.Hooks.AfterProviderAnswer, p.ID); err != nil {
			return nil, err
		}
		return s.settle(ctx, own, p, charge, nil)
	case errors.Is(err, provider.ErrNotFound) && s.clock.Now().Sub(p.CreatedAt) < s.cfg.ProviderKeyWindow:
		if p.State == StateUnknown {
			err = s.move(ctx, own, &p, StateProviderRequestSent, "provider never saw the key: sending again")
		} else {
			err = s.hold(ctx, own)
		}
		if err != nil {
			return nil, err
		}
		return s.chargeAndSettle(ctx, own, p, false)
	default:
		// The provider cannot say (or is past its key window): leave the
		// payment to the reconciler and tell the client it is processing.
		// %v, not %w: a lookup that cannot say must not read as "refused
		// before processing", which would mark the payment retryable.
		unknown := fmt.Errorf("%w: lookup: %v", provider.ErrUnknownOutcome, err) //nolint:errorlint
		return s.settle(ctx, own, p, provider.Charge{}, unknown)
	}
}

// settle commits what the provider said, together with the stored answer
// (for final outcomes) and the outbox event, in one transaction.
func (s *Service) settle(ctx context.Context, own *idempotency.Owner, p Payment, c provider.Charge, callErr error) (idempotency.Result, error) {
	now := s.clock.Now()
	mv := statemachine.Move[State]{ID: p.ID, From: p.State, At: now}
	var (
		eventType string
		resultErr error
	)
	switch {
	case callErr == nil && c.Status == provider.StatusSucceeded:
		mv.To, mv.Reason, mv.Set = StateCompleted, "provider confirmed the charge", settledColumns(c.ID, "")
		p.ProviderReference = c.ID
		eventType = outbox.TypePaymentSucceeded
	case callErr == nil && c.Status == provider.StatusDeclined:
		mv.To, mv.Reason, mv.Set = StateDeclined, "provider declined: "+c.DeclineCode, settledColumns(c.ID, c.DeclineCode)
		p.ProviderReference, p.DeclineCode = c.ID, c.DeclineCode
		eventType = outbox.TypePaymentDeclined
	case errors.Is(callErr, provider.ErrUnavailable):
		mv.To, mv.Reason = StateFailedRetryable, "provider refused before processing: "+callErr.Error()
		resultErr = ErrProviderUnavailable
	default:
		// Timeout, lost answer, or a provider that cannot say: money may have
		// moved. Never a failure; the reconciler or a retry finds out.
		mv.To, mv.Reason = StateUnknown, "outcome unknown: "+errString(callErr)
	}
	p.State, p.UpdatedAt = mv.To, now

	b := &pgx.Batch{}
	if p.State.Final() {
		if err := own.QueueFinish(b, p); err != nil {
			return nil, err
		}
	} else {
		own.QueueRelease(b, p.State.NeedsRecovery())
	}
	if mv.To != mv.From {
		if err := machine.QueueMove(b, mv); err != nil {
			return nil, err
		}
	}
	if eventType != "" {
		event, err := outbox.NewEvent(eventType, ResourceType, p.ID, p.eventPayload(), now)
		if err != nil {
			return nil, err
		}
		outbox.Queue(b, event)
	}
	if err := own.Commit(ctx, b); err != nil {
		return nil, err
	}
	s.log.InfoContext(ctx, "payment settled", "payment_id", p.ID, "from", mv.From, "to", p.State)
	if resultErr != nil {
		return nil, resultErr
	}
	return p, nil
}

// move takes p to `to` in its own transaction, and renews the caller's
// lease: a provider call follows.
func (s *Service) move(ctx context.Context, own *idempotency.Owner, p *Payment, to State, reason string) error {
	now := s.clock.Now()
	b := &pgx.Batch{}
	own.QueueHold(b, to.NeedsRecovery())
	if err := machine.QueueMove(b, statemachine.Move[State]{ID: p.ID, From: p.State, To: to, Reason: reason, At: now}); err != nil {
		return err
	}
	if err := own.Commit(ctx, b); err != nil {
		return err
	}
	p.State, p.UpdatedAt = to, now
	return nil
}

// hold renews the caller's lease before a second provider call.
func (s *Service) hold(ctx context.Context, own *idempotency.Owner) error {
	b := &pgx.Batch{}
	own.QueueHold(b, true)
	return own.Commit(ctx, b)
}

// Get returns the tenant's payment, or ErrNotFound.
func (s *Service) Get(ctx context.Context, tenant, id string) (Payment, error) {
	return getPayment(ctx, s.db, tenant, id)
}

// List returns a page of the tenant's payments, newest first.
func (s *Service) List(ctx context.Context, tenant string, q ListQuery) (Page, error) {
	return listPayments(ctx, s.db, tenant, q)
}

func errString(err error) string {
	if err == nil {
		return "no answer"
	}
	return err.Error()
}
