package providerflow_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/payments"
	"github.com/paymentsapi/paymentsapi/internal/provider"
	"github.com/paymentsapi/paymentsapi/internal/provider/sim"
	"github.com/paymentsapi/paymentsapi/internal/refunds"
	"github.com/paymentsapi/paymentsapi/internal/servicetest"
)

// A provider whose lookups lag its creates, and whose refusals may hide a
// processed request. Each test below fails without the mechanism it names.

// laggingProvider passes every call to the provider it wraps, but a lookup
// misses an object (provider.ErrNotFound) until lag has passed on the
// clock since the object was created: Stripe's Search trails its creates
// by about a minute, longer in incidents. It declares its lag.
type laggingProvider struct {
	provider.Provider
	clock *clock.Fake // set once the environment exists, before any call
	lag   time.Duration

	mu      sync.Mutex
	created map[string]time.Time // by provider key, charges and refunds alike
}

func (l *laggingProvider) LookupLag() time.Duration { return l.lag }

func (l *laggingProvider) seen(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.created[key]; !ok {
		l.created[key] = l.clock.Now()
	}
}

func (l *laggingProvider) visible(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	at, ok := l.created[key]
	return ok && !l.clock.Now().Before(at.Add(l.lag))
}

func (l *laggingProvider) Charge(ctx context.Context, req provider.ChargeRequest) (provider.Charge, error) {
	c, err := l.Provider.Charge(ctx, req)
	if err == nil {
		l.seen(req.IdempotencyKey)
	}
	return c, err
}

func (l *laggingProvider) Lookup(ctx context.Context, req provider.ChargeLookup) (provider.Charge, error) {
	c, err := l.Provider.Lookup(ctx, req)
	if err == nil && !l.visible(req.IdempotencyKey) {
		return provider.Charge{}, fmt.Errorf("lagging lookup: %w", provider.ErrNotFound)
	}
	return c, err
}

func (l *laggingProvider) Refund(ctx context.Context, req provider.RefundRequest) (provider.Refund, error) {
	r, err := l.Provider.Refund(ctx, req)
	if err == nil {
		l.seen(req.IdempotencyKey)
	}
	return r, err
}

func (l *laggingProvider) LookupRefund(ctx context.Context, req provider.RefundLookup) (provider.Refund, error) {
	r, err := l.Provider.LookupRefund(ctx, req)
	if err == nil && !l.visible(req.IdempotencyKey) {
		return provider.Refund{}, fmt.Errorf("lagging lookup: %w", provider.ErrNotFound)
	}
	return r, err
}

// lagEnv is an environment whose provider lags by lag and follows script
// (scriptedProvider, outside the lag: "forward+refuse" creates the object,
// then answers a refusal), and declares its lag (the script passes the
// declaration on).
func lagEnv(t *testing.T, lag time.Duration, script *scriptedProvider, opts ...servicetest.Option) *servicetest.Env {
	t.Helper()
	lagging := &laggingProvider{lag: lag, created: map[string]time.Time{}}
	opts = append(opts,
		servicetest.WithProvider(func(p provider.Provider) provider.Provider {
			lagging.Provider = p
			script.Provider = lagging
			return script
		}))
	e := servicetest.New(t, opts...)
	lagging.clock = e.Clock
	return e
}

// refusedButCharged is a payment whose one send the provider processed and
// answered with a refusal (503), on a provider whose lookups lag by lag.
func refusedButCharged(t *testing.T, lag time.Duration) (*servicetest.Env, string) {
	t.Helper()
	e := lagEnv(t, lag, &scriptedProvider{charges: []string{"forward+refuse"}})
	if r := e.Post("k-1", servicetest.Body()); r.Status != http.StatusServiceUnavailable {
		t.Fatalf("send: %d %s", r.Status, r.Body)
	}
	return e, e.OnlyPaymentID()
}

// Defect 1: a payment refused, retried by its client just before its
// abandon time, charged by the provider under a refusal. The look after
// the refusal comes after the abandon time, while the provider's lookup
// still misses the charge: the payment was canceled (its invoice freed for
// a second charge). Now "not found" counts only once the lag has passed
// since the last send, so the look finds the charge.
func TestAbandonNeverCancelsAChargeTheLookupMisses(t *testing.T) {
	t.Parallel()
	lag := 5 * time.Minute
	script := &scriptedProvider{charges: []string{"refuse", "forward+refuse"}}
	e := lagEnv(t, lag, script)
	if r := e.Post("k-1", servicetest.Body()); r.Status != http.StatusServiceUnavailable {
		t.Fatalf("first send: %d %s", r.Status, r.Body)
	}
	id := e.OnlyPaymentID()
	e.Clock.Advance(e.Config.ReplayTTL - 30*time.Second) // just before its abandon time
	if r := e.Post("k-1", servicetest.Body()); r.Status != http.StatusServiceUnavailable {
		t.Fatalf("the retry: %d %s", r.Status, r.Body)
	}
	// Past the abandon time, inside the lag, then past the lag.
	for _, step := range []time.Duration{time.Minute, 2 * time.Minute, lag} {
		e.Clock.Advance(step)
		e.Reconcile()
		if s := e.PaymentState(id); s == payments.StateCanceled {
			t.Fatalf("at %s: a charged payment was canceled", e.Clock.Now())
		}
	}
	e.AssertChargedOnce(id)
	if r := e.Post("k-other", servicetest.Body()); r.Status != http.StatusConflict || r.JSON(t)["code"] != "DUPLICATE_MERCHANT_REFERENCE" {
		t.Errorf("the invoice of the charged payment: %d %s", r.Status, r.Body)
	}
}

// Defect 2: the provider's webhook about a refused-but-processed payment
// arrives seconds after the refusal; its look (lookup only) misses the
// charge and used to push the booked re-check to the abandon time, a day
// later. A look-up-only owner never moves a booked look later.
func TestAWebhookNeverPostponesTheRefusalsRecheck(t *testing.T) {
	t.Parallel()
	lag := 90 * time.Second
	e, id := refusedButCharged(t, lag)
	e.Clock.Advance(5 * time.Second)
	// (Whatever the look answers: it cannot see the charge yet.)
	got, err := e.Core.Reconciler.ResolveNow(context.Background(), idempotency.Resource{Type: payments.ResourceType, ID: id})
	t.Logf("the webhook's look inside the lag: %q %v", got, err)
	e.Clock.Advance(lag)
	if stats := e.Reconcile(); stats[payments.OutcomeSucceeded] != 1 {
		t.Fatalf("the re-check after the lag: %v, want the payment succeeded", stats)
	}
	e.AssertChargedOnce(id)
}

// Defect 7: the lookup lags a little longer than the one-minute re-check.
// The re-check used to take its "not found" for certain and leave the
// charged payment FAILED until its abandon time; the re-check now comes
// after the lag, and a look inside the lag books another.
func TestTheRefusalsRecheckWaitsOutTheLookupLag(t *testing.T) {
	t.Parallel()
	e, id := refusedButCharged(t, 90*time.Second)
	e.Clock.Advance(time.Minute)
	e.Reconcile()
	e.Clock.Advance(time.Minute)
	if stats := e.Reconcile(); stats[payments.OutcomeSucceeded] != 1 {
		t.Fatalf("two minutes after the refusal: %v, want the payment succeeded", stats)
	}
	e.AssertChargedOnce(id)
}

// Defect 3: a client that retries a truly refused payment (the provider
// never holds it) made the reconciler's look after each refusal an error
// of an attempt that never reset; the 20th marked the key for manual
// review, so the payment was never abandoned and its invoice held for
// good. A certain answer is a resolved pass.
func TestManyTrueRefusalsNeverHoldTheInvoiceForGood(t *testing.T) {
	t.Parallel()
	e := servicetest.New(t, servicetest.WithRecovery(idempotency.RecoveryPolicy{MaxAttempts: 3}))
	refused := servicetest.Body("paymentMethod", `"`+sim.MethodUnavailable+`"`)
	for i := range 6 {
		if r := e.Post("k-1", refused); r.Status != http.StatusServiceUnavailable {
			t.Fatalf("send %d: %d %s", i, r.Status, r.Body)
		}
		e.Clock.Advance(2 * time.Minute)
		stats := e.Reconcile()
		if stats[idempotency.OutcomeRescheduled] != 1 || len(stats) != 1 {
			t.Fatalf("the look after refusal %d: %v, want one resolved pass", i, stats)
		}
	}
	if n := e.Count(`idempotency_keys WHERE manual_review_at IS NOT NULL`); n != 0 {
		t.Fatalf("%d keys marked for manual review", n)
	}
	e.Clock.Advance(e.Config.ReplayTTL)
	if stats := e.Reconcile(); stats[payments.OutcomeCanceled] != 1 {
		t.Fatalf("after the abandon time: %v, want the payment canceled", stats)
	}
	if r := e.Post("k-2", servicetest.Body()); r.Status != http.StatusCreated {
		t.Errorf("the invoice after the cancellation: %d %s", r.Status, r.Body)
	}
}

// Defect 6: a refund refused but processed, whose lookup lags past the
// one-minute re-check: the "not found" stopped every further look (refund
// keys have no abandon time), the refund stayed FAILED while the provider
// held it, and a new key could refund the same amount again.
func TestARefusedButProcessedRefundIsFoundAfterTheLag(t *testing.T) {
	t.Parallel()
	lag := 90 * time.Second
	script := &scriptedProvider{refunds: []string{"forward+refuse"}}
	e := lagEnv(t, lag, script)
	pay := e.Pay("pm_card_visa", "inv-1")
	if r := e.Refund(pay, "r-1", `{"amount":"10.00"}`); r.Status != http.StatusServiceUnavailable {
		t.Fatalf("refund: %d %s", r.Status, r.Body)
	}
	e.Clock.Advance(5 * time.Second) // and the webhook looks inside the lag
	var refundID string
	if err := e.Pool.QueryRow(context.Background(), `SELECT id FROM refunds`).Scan(&refundID); err != nil {
		t.Fatal(err)
	}
	got, err := e.Core.Reconciler.ResolveNow(context.Background(), idempotency.Resource{Type: refunds.ResourceType, ID: refundID})
	t.Logf("the webhook's look inside the lag: %q %v", got, err)
	e.Clock.Advance(time.Minute)
	e.Reconcile()
	e.Clock.Advance(time.Minute)
	e.Reconcile()
	if g := e.Get(servicetest.SecretA, "/payments/"+pay).JSON(t); g["refundedAmount"] != "10.00" {
		t.Fatalf("payment after the lag: refundedAmount %v, want 10.00", g["refundedAmount"])
	}
	if r := e.Refund(pay, "r-2", `{"amount":"10.00"}`); r.Status != http.StatusConflict {
		t.Errorf("a second refund of the whole amount: %d %s", r.Status, r.Body)
	}
	if n := len(e.ProviderRefunds(e.ChargeOf(pay))); n != 1 {
		t.Errorf("provider refunds: %d, want 1", n)
	}
}

// Defect 5: a refund has no canceled end, so its key's abandon time means
// nothing; a refund key that had one (given by migration 00009) made every
// release re-queue it at once, and the reconciler looked it up again and
// again in one pass. Now an operation without a canceled end never books
// a look at its abandon time, migration 00017 cleared those times, and
// 00020 dropped the key's abandon_at: what is left to test is that a
// refused refund waiting for its client is looked at once, then left.
func TestARefundKeysAbandonTimeIsIgnored(t *testing.T) {
	t.Parallel()
	script := &scriptedProvider{refunds: []string{"refuse"}}
	e := lagEnv(t, 0, script)
	pay := e.Pay("pm_card_visa", "inv-1")
	if r := e.Refund(pay, "r-1", `{"amount":"10.00"}`); r.Status != http.StatusServiceUnavailable {
		t.Fatalf("refund: %d %s", r.Status, r.Body)
	}
	e.Clock.Advance(2 * time.Minute)
	if stats := e.Reconcile(); stats[idempotency.OutcomeRescheduled] != 1 || len(stats) != 1 {
		t.Errorf("the look after the refusal: %v, want one resolved pass", stats)
	}
	e.Clock.Advance(time.Hour)
	if stats := e.Reconcile(); len(stats) != 0 {
		t.Errorf("the reconciler keeps looking at a refund waiting for its client: %v", stats)
	}
}
