package payments

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/ids"
	"github.com/paymentsapi/paymentsapi/internal/metrics"
	"github.com/paymentsapi/paymentsapi/internal/outbox"
	"github.com/paymentsapi/paymentsapi/internal/problem"
	"github.com/paymentsapi/paymentsapi/internal/provider"
)

// Config holds the timing rules of the Service.
type Config struct {
	// ReplayTTL is how long a final answer is replayed (IDEMPOTENCY_TTL).
	ReplayTTL time.Duration
	// Lease is how long a request owns an in-flight key (LEASE_DURATION).
	Lease time.Duration
	// ProviderTimeout bounds one provider call (PROVIDER_TIMEOUT).
	ProviderTimeout time.Duration
	// ProviderKeyWindow is how long the provider remembers its idempotency
	// keys. Past it, a payment is only ever looked up, never sent again.
	ProviderKeyWindow time.Duration
	// RetryAfter is what 202 and 409 answers advise clients to wait.
	RetryAfter time.Duration
	// Recovery is how the reconciler spaces and bounds its attempts.
	Recovery RecoveryPolicy
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

// KeyWaiter tells a request when the key of a payment changes, on any
// instance (idempotency.Listener).
type KeyWaiter interface {
	Subscribe(paymentID string) (<-chan struct{}, func())
}

// Deps are the collaborators of a Service.
type Deps struct {
	DB       *pgxpool.Pool
	Provider provider.Provider
	Clock    clock.Clock
	Log      *slog.Logger
	Metrics  *metrics.Metrics
	// Waiter lets duplicates wait for the original (Prefer: wait). Nil:
	// duplicates never wait.
	Waiter KeyWaiter
}

// Service creates payments idempotently, reads them back, and resolves
// payments whose outcome is unknown.
type Service struct {
	db       *pgxpool.Pool
	provider provider.Provider
	clock    clock.Clock
	cfg      Config
	log      *slog.Logger
	metrics  *metrics.Metrics
	waiter   KeyWaiter
}

// NewService returns a Service. The rules between the settings (a lease
// longer than the provider timeout) are checked once, at start-up, by
// package config.
func NewService(d Deps, cfg Config) *Service {
	if cfg.RetryAfter <= 0 {
		cfg.RetryAfter = time.Second
	}
	cfg.Recovery = cfg.Recovery.withDefaults()
	return &Service{db: d.DB, provider: d.Provider, clock: d.Clock, cfg: cfg, log: d.Log, metrics: d.Metrics, waiter: d.Waiter}
}

// Result is the answer to a create request: what to send, and whether it is
// a replay of a stored answer.
type Result struct {
	Response  idempotency.Response
	Replayed  bool
	PaymentID string
}

// Errors of Create that are answers in their own right; none is stored.
var (
	// ErrKeyReused: the key was used with a different command (422).
	ErrKeyReused = errors.New("this Idempotency-Key was already used with a different request")
	// ErrProviderUnavailable: the provider refused before processing (503).
	// No money moved; a retry with the same key resumes the same payment.
	ErrProviderUnavailable = errors.New("the payment provider is unavailable; no money moved, retry with the same Idempotency-Key")
)

// errReferenceFreed: the payment that held a merchant reference when the
// claim collided with it no longer holds it.
var errReferenceFreed = errors.New("merchant reference freed during claim")

// KeyInUseError: the original request still owns the key (409).
type KeyInUseError struct{ RetryAfter time.Duration }

func (e *KeyInUseError) Error() string {
	return "a request with this Idempotency-Key is still in progress; retry later"
}

// KeyExpiredError: the key's stored answer is past the replay window (409).
type KeyExpiredError struct{ PaymentID string }

func (e *KeyExpiredError) Error() string {
	return "the stored answer for this Idempotency-Key has expired; GET the payment instead"
}

// DuplicateReferenceError: another key already created a live payment for
// this (account, merchant reference) (409).
type DuplicateReferenceError struct{ PaymentID string }

func (e *DuplicateReferenceError) Error() string {
	return "a payment for this accountId and merchantReference already exists"
}

// MaxWait bounds how long a duplicate may wait for its original.
const MaxWait = 10 * time.Second

// Create runs the create-payment command cmd under the tenant's key. The
// first request claims the key, creates the payment and its PaymentCreated
// event in one transaction, and takes the payment through the provider. A
// retry is answered from what the key's record says; if the original is in
// flight it may wait up to wait (at most MaxWait) for it to finish.
func (s *Service) Create(ctx context.Context, tenant, key string, cmd Command, wait time.Duration) (Result, error) {
	scope := idempotency.Scope{Tenant: tenant, Operation: OperationCreate, Key: key}
	fp := cmd.Fingerprint()
	now := s.clock.Now()
	p := Payment{
		ID: ids.NewPaymentID(), TenantID: tenant, Command: cmd,
		State: StateReceived, CreatedAt: now, UpdatedAt: now,
	}
	// A second round is needed only when the world moved between two
	// statements: the payment holding the merchant reference was declined,
	// or clean-up deleted the key we collided with.
	for round := 0; ; round++ {
		claimed, err := s.claim(ctx, scope, fp, p)
		if errors.Is(err, errReferenceFreed) && round == 0 {
			continue
		}
		if err != nil {
			return Result{}, err
		}
		if claimed {
			s.metrics.IdempotencyClaims.Inc()
			s.log.InfoContext(ctx, "idempotency key claimed", "payment_id", p.ID)
			if err := run(ctx, s.cfg.Hooks.AfterClaim, p.ID); err != nil {
				return Result{}, err
			}
			return s.process(ctx, p, 1)
		}
		res, err := s.answerRetry(ctx, scope, fp, min(wait, MaxWait))
		if errors.Is(err, idempotency.ErrNotFound) && round == 0 {
			continue
		}
		return res, err
	}
}

// claim is the first transaction: the key, the payment in RECEIVED, its
// first transition and the PaymentCreated event, all or nothing.
func (s *Service) claim(ctx context.Context, scope idempotency.Scope, fp []byte, p Payment) (bool, error) {
	event, err := outbox.NewEvent(outbox.TypePaymentCreated, p.ID, p.eventPayload(), p.CreatedAt)
	if err != nil {
		return false, err
	}
	claimed := false
	err = pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		claimed, err = idempotency.Claim(ctx, tx, scope, fp, p.ID, p.CreatedAt, s.cfg.Lease)
		if err != nil || !claimed {
			return err
		}
		b := &pgx.Batch{}
		queueInsert(b, p, "request accepted")
		outbox.Queue(b, event)
		return tx.SendBatch(ctx, b).Close()
	})
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" && pgErr.ConstraintName == merchantReferenceConstraint {
		id, lookupErr := liveByMerchantReference(ctx, s.db, p.TenantID, p.Command.AccountID, p.Command.MerchantReference)
		if errors.Is(lookupErr, ErrNotFound) {
			return false, errReferenceFreed
		}
		if lookupErr != nil {
			return false, fmt.Errorf("duplicate merchant reference: %w", lookupErr)
		}
		return false, &DuplicateReferenceError{PaymentID: id}
	}
	if err != nil {
		return false, fmt.Errorf("claim payment: %w", err)
	}
	return claimed, nil
}

// answerRetry answers a request whose key was already claimed. While the
// original is in flight it waits, up to wait, for a notification that the
// key changed, then answers as a retry would.
func (s *Service) answerRetry(ctx context.Context, scope idempotency.Scope, fp []byte, wait time.Duration) (Result, error) {
	var (
		waitCtx context.Context // nil: do not wait
		changed <-chan struct{}
		lost    int // takeover races lost
	)
	if wait > 0 && s.waiter != nil {
		var cancel context.CancelFunc
		waitCtx, cancel = context.WithTimeout(ctx, wait)
		defer cancel()
	}
	for {
		rec, err := idempotency.Load(ctx, s.db, scope)
		if err != nil {
			return Result{}, err // ErrNotFound: deleted by clean-up meanwhile; Create claims again
		}
		now := s.clock.Now()
		switch rec.Decide(fp, now, s.cfg.ReplayTTL) {
		case idempotency.DecideMismatch:
			s.metrics.IdempotencyConflicts.WithLabelValues("mismatch").Inc()
			return Result{}, ErrKeyReused
		case idempotency.DecideExpired:
			s.metrics.IdempotencyConflicts.WithLabelValues("expired").Inc()
			return Result{}, &KeyExpiredError{PaymentID: rec.PaymentID}
		case idempotency.DecideReplay:
			s.metrics.IdempotencyReplays.Inc()
			return Result{Response: *rec.Response, Replayed: true, PaymentID: rec.PaymentID}, nil
		case idempotency.DecideInFlight:
			if waitCtx == nil || waitCtx.Err() != nil {
				s.metrics.IdempotencyConflicts.WithLabelValues("in_flight").Inc()
				return Result{}, &KeyInUseError{RetryAfter: s.cfg.RetryAfter}
			}
			if changed == nil {
				// Subscribe, then look again: a change between the load
				// and the subscription is not missed.
				var unsubscribe func()
				changed, unsubscribe = s.waiter.Subscribe(rec.PaymentID)
				defer unsubscribe()
				continue
			}
			// Wake on a notification, or when the owner's lease runs out
			// (a dead owner sends none): then a takeover is due.
			leaseLeft := time.NewTimer(max(rec.LeaseExpiresAt.Sub(now), 0) + 10*time.Millisecond)
			woken := "notified"
			select {
			case <-changed:
			case <-leaseLeft.C:
				woken = "lease_expired"
			case <-waitCtx.Done():
				woken = "timeout"
			}
			leaseLeft.Stop()
			s.metrics.IdempotencyWaits.WithLabelValues(woken).Inc()
		case idempotency.DecideTakeOver:
			token, ok, err := idempotency.TakeOver(ctx, s.db, scope, rec.FencingToken, now, s.cfg.Lease)
			if err != nil {
				return Result{}, err
			}
			if !ok {
				// Someone else moved first and now owns a live lease, or
				// finished: look again. Losing more than a few races in a
				// row means the key is contended: answer 409.
				if lost++; lost > 3 {
					s.metrics.IdempotencyConflicts.WithLabelValues("in_flight").Inc()
					return Result{}, &KeyInUseError{RetryAfter: s.cfg.RetryAfter}
				}
				continue
			}
			s.metrics.IdempotencyTakeovers.Inc()
			p, err := getPayment(ctx, s.db, scope.Tenant, rec.PaymentID)
			if err != nil {
				return Result{}, err
			}
			s.log.InfoContext(ctx, "idempotency key taken over", "payment_id", p.ID,
				"state", p.State, "fencing_token", token)
			return s.process(ctx, p, token)
		}
	}
}

// process takes a payment whose key the caller owns with token from its
// recorded state to an answer. It is the one place that resumes work, for
// the first request and for a takeover alike.
func (s *Service) process(ctx context.Context, p Payment, token int64) (Result, error) {
	// The client going away must not stop a payment halfway; every step
	// below is bounded by its own timeout.
	ctx = context.WithoutCancel(ctx)
	switch p.State {
	case StateReceived, StateFailedRetryable:
		return s.send(ctx, p, token)
	case StateProviderRequestSent, StateUnknown:
		return s.recoverOutcome(ctx, p, token)
	default:
		// A final state is committed together with its stored answer, so a
		// key without an answer never points at a final payment.
		return Result{}, fmt.Errorf("payment %s is %s but its key has no stored answer", p.ID, p.State)
	}
}

// send records PROVIDER_REQUEST_SENT, commits, and only then calls the
// provider, with the key derived from the payment. A payment reaches send
// only from RECEIVED or FAILED_RETRYABLE: no earlier call for it can still be
// on its way to the provider, and the transition, fenced, makes this owner
// the only caller. So a refusal of this call means no money moved.
func (s *Service) send(ctx context.Context, p Payment, token int64) (Result, error) {
	if err := s.commitTransition(ctx, &p, token, StateProviderRequestSent, "sending charge to provider"); err != nil {
		return s.afterLostWrite(ctx, p, err)
	}
	return s.chargeAndSettle(ctx, p, token, true)
}

// chargeAndSettle calls the provider for a payment recorded as
// PROVIDER_REQUEST_SENT and commits what it said. soleCall says whether this
// call is the only one that can have reached the provider for the payment:
// only then does a refusal prove that no money moved.
func (s *Service) chargeAndSettle(ctx context.Context, p Payment, token int64, soleCall bool) (Result, error) {
	if err := run(ctx, s.cfg.Hooks.AfterRequestSent, p.ID); err != nil {
		return Result{}, err
	}
	charge, err := s.charge(ctx, p)
	if err := run(ctx, s.cfg.Hooks.AfterProviderAnswer, p.ID); err != nil {
		return Result{}, err
	}
	if errors.Is(err, provider.ErrUnavailable) && !soleCall {
		// An earlier call (a dead owner's, or one whose answer was lost)
		// may still reach the provider: this refusal proves nothing.
		err = fmt.Errorf("%w: refused, but an earlier call may still be processed: %v", provider.ErrUnknownOutcome, err) //nolint:errorlint
	}
	return s.settle(ctx, p, token, charge, err)
}

// recoverOutcome asks the provider what became of a request that may have
// been sent, and never sends it again unless the provider is certain it
// never saw the key (and still remembers keys as old as this payment).
func (s *Service) recoverOutcome(ctx context.Context, p Payment, token int64) (Result, error) {
	charge, err := s.lookup(ctx, p)
	switch {
	case err == nil:
		if err := run(ctx, s.cfg.Hooks.AfterProviderAnswer, p.ID); err != nil {
			return Result{}, err
		}
		return s.settle(ctx, p, token, charge, nil)
	case errors.Is(err, provider.ErrNotFound) && s.clock.Now().Sub(p.CreatedAt) < s.cfg.ProviderKeyWindow:
		var err error
		if p.State == StateUnknown {
			err = s.commitTransition(ctx, &p, token, StateProviderRequestSent, "provider never saw the key: sending again")
		} else {
			err = s.renewLease(ctx, p, token)
		}
		if err != nil {
			return s.afterLostWrite(ctx, p, err)
		}
		return s.chargeAndSettle(ctx, p, token, false)
	default:
		// The provider cannot say (or is past its key window): leave the
		// payment to the reconciler and tell the client it is processing.
		// %v, not %w: a lookup that cannot say must not read as "refused
		// before processing", which would mark the payment retryable.
		unknown := fmt.Errorf("%w: lookup: %v", provider.ErrUnknownOutcome, err) //nolint:errorlint
		return s.settle(ctx, p, token, provider.Charge{}, unknown)
	}
}

func (s *Service) charge(ctx context.Context, p Payment) (provider.Charge, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ProviderTimeout)
	defer cancel()
	start := time.Now()
	c, err := s.provider.Charge(ctx, provider.ChargeRequest{
		IdempotencyKey: ProviderKey(p.ID),
		AmountMinor:    p.Command.AmountMinor,
		Currency:       p.Command.Currency,
		PaymentMethod:  p.Command.PaymentMethod,
		Description:    p.Command.Description,
		PaymentID:      p.ID,
	})
	s.observeProvider("charge", start, c, err)
	return c, err
}

func (s *Service) lookup(ctx context.Context, p Payment) (provider.Charge, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ProviderTimeout)
	defer cancel()
	start := time.Now()
	c, err := s.provider.Lookup(ctx, ProviderKey(p.ID))
	s.observeProvider("lookup", start, c, err)
	return c, err
}

func (s *Service) observeProvider(op string, start time.Time, c provider.Charge, err error) {
	outcome := string(c.Status)
	switch {
	case errors.Is(err, provider.ErrNotFound):
		outcome = "not_found"
	case errors.Is(err, provider.ErrUnavailable):
		outcome = "unavailable"
	case err != nil:
		outcome = "unknown"
	}
	s.metrics.ProviderCalls.WithLabelValues(op, outcome).Observe(time.Since(start).Seconds())
}

// settle commits what the provider said, together with the stored answer
// (for final outcomes) and the outbox event, in one transaction.
func (s *Service) settle(ctx context.Context, p Payment, token int64, c provider.Charge, callErr error) (Result, error) {
	now := s.clock.Now()
	from := p.State
	t := Transition{PaymentID: p.ID, From: from, Token: token, At: now}
	p.UpdatedAt = now
	var (
		eventType string
		answer    *idempotency.Response // stored and replayed
		result    Result
		resultErr error
	)
	switch {
	case callErr == nil && c.Status == provider.StatusSucceeded:
		t.To, t.Reason, t.ProviderReference = StateCompleted, "provider confirmed the charge", c.ID
		p.State, p.ProviderReference = StateCompleted, c.ID
		eventType = outbox.TypePaymentSucceeded
		answer = &idempotency.Response{Status: http.StatusCreated, Body: p.JSON(), Headers: map[string]string{
			"Content-Type": "application/json", "Location": p.Location(),
		}}
	case callErr == nil && c.Status == provider.StatusDeclined:
		t.To, t.Reason = StateDeclined, "provider declined: "+c.DeclineCode
		t.ProviderReference, t.DeclineCode = c.ID, c.DeclineCode
		p.State, p.ProviderReference, p.DeclineCode = StateDeclined, c.ID, c.DeclineCode
		eventType = outbox.TypePaymentDeclined
		prob := problem.New(http.StatusPaymentRequired, problem.PaymentDeclined, "The payment provider declined the payment.")
		prob.PaymentID, prob.DeclineCode = p.ID, c.DeclineCode
		answer = &idempotency.Response{Status: http.StatusPaymentRequired, Body: prob.JSON(), Headers: map[string]string{
			"Content-Type": problem.ContentType,
		}}
	case errors.Is(callErr, provider.ErrUnavailable):
		t.To, t.Reason = StateFailedRetryable, "provider refused before processing: "+callErr.Error()
		p.State = StateFailedRetryable
		resultErr = ErrProviderUnavailable
	default:
		// Timeout, lost answer, or a provider that cannot say: money may have
		// moved. Never a failure; the reconciler or a retry finds out.
		t.To, t.Reason = StateUnknown, "outcome unknown: "+errString(callErr)
		p.State = StateUnknown
		result = s.processingAnswer(p)
	}

	b := &pgx.Batch{}
	if t.To != from {
		if err := queueTransition(b, t); err != nil {
			return Result{}, err
		}
	}
	if eventType != "" {
		event, err := outbox.NewEvent(eventType, p.ID, p.eventPayload(), now)
		if err != nil {
			return Result{}, err
		}
		outbox.Queue(b, event)
	}
	if answer != nil {
		idempotency.QueueFinish(b, p.ID, token, *answer, now)
		result = Result{Response: *answer, PaymentID: p.ID}
	} else {
		idempotency.QueueRelease(b, p.ID, token)
	}
	if err := s.sendBatch(ctx, b); err != nil {
		return s.afterLostWrite(ctx, p, err)
	}
	s.log.InfoContext(ctx, "payment settled", "payment_id", p.ID, "from", from, "to", p.State)
	return result, resultErr
}

// processingAnswer is the 202 for a payment whose outcome is not yet known.
// It is not stored: later retries get the resolved answer.
func (s *Service) processingAnswer(p Payment) Result {
	return Result{PaymentID: p.ID, Response: idempotency.Response{
		Status: http.StatusAccepted,
		Body:   p.JSON(),
		Headers: map[string]string{
			"Content-Type": "application/json",
			"Location":     p.Location(),
			"Retry-After":  strconv.Itoa(int(s.cfg.RetryAfter.Seconds() + 0.5)),
		},
	}}
}

// commitTransition moves p to `to` in its own transaction, and renews the
// caller's lease: a provider call follows.
func (s *Service) commitTransition(ctx context.Context, p *Payment, token int64, to State, reason string) error {
	now := s.clock.Now()
	b := &pgx.Batch{}
	if err := queueTransition(b, Transition{PaymentID: p.ID, From: p.State, To: to, Token: token, Reason: reason, At: now}); err != nil {
		return err
	}
	idempotency.QueueRenew(b, p.ID, token, now.Add(s.cfg.Lease))
	if err := s.sendBatch(ctx, b); err != nil {
		return err
	}
	p.State, p.UpdatedAt = to, now
	return nil
}

// renewLease extends the caller's lease before a second provider call.
func (s *Service) renewLease(ctx context.Context, p Payment, token int64) error {
	b := &pgx.Batch{}
	idempotency.QueueRenew(b, p.ID, token, s.clock.Now().Add(s.cfg.Lease))
	return s.sendBatch(ctx, b)
}

// dbStepTimeout bounds one transaction of a payment's progress. It is well
// below any sane lease, so an owner stuck on a silent database gives up
// before its key can be taken over.
const dbStepTimeout = 10 * time.Second

// sendBatch runs b in one transaction.
func (s *Service) sendBatch(ctx context.Context, b *pgx.Batch) error {
	ctx, cancel := context.WithTimeout(ctx, dbStepTimeout)
	defer cancel()
	return pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error { return tx.SendBatch(ctx, b).Close() })
}

// afterLostWrite answers a request whose write was refused because another
// owner took the key over: the key's record, not this request, now speaks
// for the payment.
func (s *Service) afterLostWrite(ctx context.Context, p Payment, err error) (Result, error) {
	if !errors.Is(err, ErrStaleWrite) && !errors.Is(err, idempotency.ErrFenced) {
		return Result{}, err
	}
	s.log.WarnContext(ctx, "write refused: key taken over by another owner", "payment_id", p.ID, "error", err)
	rec, loadErr := idempotency.LoadByPayment(ctx, s.db, p.ID)
	if loadErr != nil {
		return Result{}, errors.Join(err, loadErr)
	}
	if rec.Response != nil {
		return Result{Response: *rec.Response, Replayed: true, PaymentID: p.ID}, nil
	}
	return Result{}, &KeyInUseError{RetryAfter: s.cfg.RetryAfter}
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
