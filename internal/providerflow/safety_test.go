package providerflow_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/payments"
	"github.com/paymentsapi/paymentsapi/internal/provider"
	"github.com/paymentsapi/paymentsapi/internal/servicetest"
)

// scriptedProvider answers each charge and lookup as its script says, in
// order; an entry "forward" passes the call to the simulator, "forward+refuse"
// passes it and then reports a refusal (the processed request whose answer
// was a 429 to a resend), "refuse" and "lost" answer without calling it, and
// "ambiguous" is a lookup that found two objects. Refunds follow their own
// script (refuse, forward+refuse). Past the script: forward.
type scriptedProvider struct {
	provider.Provider
	mu                       sync.Mutex
	charges, lookup, refunds []string
}

func (s *scriptedProvider) next(script *[]string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(*script) == 0 {
		return "forward"
	}
	step := (*script)[0]
	*script = (*script)[1:]
	return step
}

func (s *scriptedProvider) Charge(ctx context.Context, req provider.ChargeRequest) (provider.Charge, error) {
	switch step := s.next(&s.charges); step {
	case "refuse":
		return provider.Charge{}, fmt.Errorf("scripted: %w", provider.ErrUnavailable)
	case "lost":
		return provider.Charge{}, fmt.Errorf("scripted: %w", provider.ErrUnknownOutcome)
	case "forward+refuse":
		if _, err := s.Provider.Charge(ctx, req); err != nil {
			return provider.Charge{}, err
		}
		return provider.Charge{}, fmt.Errorf("scripted 429 to a resend: %w", provider.ErrUnavailable)
	default:
		return s.Provider.Charge(ctx, req)
	}
}

func (s *scriptedProvider) Lookup(ctx context.Context, l provider.ChargeLookup) (provider.Charge, error) {
	switch s.next(&s.lookup) {
	case "lost":
		return provider.Charge{}, fmt.Errorf("scripted: %w", provider.ErrUnknownOutcome)
	case "ambiguous":
		return provider.Charge{}, fmt.Errorf("scripted: %w", provider.ErrAmbiguous)
	default:
		return s.Provider.Lookup(ctx, l)
	}
}

func (s *scriptedProvider) Refund(ctx context.Context, req provider.RefundRequest) (provider.Refund, error) {
	switch step := s.next(&s.refunds); step {
	case "refuse":
		return provider.Refund{}, fmt.Errorf("scripted: %w", provider.ErrUnavailable)
	case "forward+refuse":
		if _, err := s.Provider.Refund(ctx, req); err != nil {
			return provider.Refund{}, err
		}
		return provider.Refund{}, fmt.Errorf("scripted 429 to a resend: %w", provider.ErrUnavailable)
	default:
		return s.Provider.Refund(ctx, req)
	}
}

func withScript(s *scriptedProvider) servicetest.Option {
	return servicetest.WithProvider(func(p provider.Provider) provider.Provider { s.Provider = p; return s })
}

// The provider processed the charge but the answer the service saw was a
// refusal (a 429 to a resent copy). The payment is FAILED_RETRYABLE and the
// client told "no money moved"; after a grace, the reconciler looks it up
// (never sends it) and completes it.
func TestARefusalThatHidAChargeIsFoundByTheReconciler(t *testing.T) {
	t.Parallel()
	script := &scriptedProvider{charges: []string{"forward+refuse"}}
	e := servicetest.New(t, withScript(script))
	if r := e.Post("k-1", servicetest.Body()); r.Status != http.StatusServiceUnavailable {
		t.Fatalf("got %d %s", r.Status, r.Body)
	}
	id := e.OnlyPaymentID()
	if stats, _ := e.Core.Reconciler.RunOnce(context.Background(), 10); len(stats) != 0 {
		t.Errorf("the reconciler looked before the grace: %v", stats)
	}
	e.Clock.Advance(2 * time.Minute)
	stats, err := e.Core.Reconciler.RunOnce(context.Background(), 10)
	if err != nil || stats[payments.OutcomeSucceeded] != 1 {
		t.Fatalf("reconciler after the grace: %v %v", stats, err)
	}
	e.AssertChargedOnce(id)
	if r := e.Post("k-1", servicetest.Body()); r.Status != http.StatusCreated || r.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("the client's retry: %d %s", r.Status, r.Body)
	}
}

// A refusal that was true: the reconciler's look finds nothing, sends
// nothing, and stops looking; the payment waits for its client.
func TestATrueRefusalIsLookedUpOnceAndNeverSent(t *testing.T) {
	t.Parallel()
	e := servicetest.New(t)
	if r := e.Post("k-1", servicetest.Body("paymentMethod", `"pm_sim_unavailable"`)); r.Status != http.StatusServiceUnavailable {
		t.Fatalf("got %d %s", r.Status, r.Body)
	}
	id := e.OnlyPaymentID()
	e.Clock.Advance(2 * time.Minute)
	// The look confirms the refusal: a resolved pass (the payment waits for
	// its client, and the count of attempts starts again).
	if stats, err := e.Core.Reconciler.RunOnce(context.Background(), 10); err != nil || stats[idempotency.OutcomeRescheduled] != 1 || len(stats) != 1 {
		t.Fatalf("reconciler: %v %v", stats, err)
	}
	if s := e.PaymentState(id); s != payments.StateFailedRetryable {
		t.Errorf("payment %s, want FAILED_RETRYABLE", s)
	}
	if n := len(e.Sim.Charges()); n != 0 {
		t.Errorf("the reconciler sent a refused payment: %d charges", n)
	}
	e.Clock.Advance(time.Hour)
	if stats, _ := e.Core.Reconciler.RunOnce(context.Background(), 10); len(stats) != 0 {
		t.Errorf("the reconciler keeps looking at a payment the provider never saw: %v", stats)
	}
}

// A lookup that finds two objects for one key marks the payment for manual
// review at once, and counts it; it stays PROCESSING.
func TestAnAmbiguousLookupIsMarkedForReview(t *testing.T) {
	t.Parallel()
	script := &scriptedProvider{charges: []string{"lost"}, lookup: []string{"ambiguous"}}
	e := servicetest.New(t, withScript(script))
	if r := e.Post("k-1", servicetest.Body()); r.Status != http.StatusAccepted {
		t.Fatalf("got %d %s", r.Status, r.Body)
	}
	stats, err := e.Core.Reconciler.RunOnce(context.Background(), 10)
	if err != nil || stats["manual_review"] != 1 {
		t.Fatalf("reconciler: %v %v, want manual_review at the first attempt", stats, err)
	}
	if e.Metric("paymentsapi_payments_manual_review", nil) != 1 {
		t.Error("the manual review gauge does not count it")
	}
	if g := e.Get(servicetest.SecretA, "/payments/"+e.OnlyPaymentID()).JSON(t); g["status"] != "PROCESSING" {
		t.Errorf("payment %v", g["status"])
	}
	e.Clock.Advance(time.Hour)
	if stats, _ := e.Core.Reconciler.RunOnce(context.Background(), 10); len(stats) != 0 {
		t.Errorf("the reconciler keeps trying a payment marked for review: %v", stats)
	}
}

// The provider's key window runs from the first request that reached it, not
// from the payment's creation. Refused at T0, first really sent at T0+25h and
// lost, the payment may still be sent again by its key at T0+25h.
func TestTheKeyWindowRunsFromTheFirstSend(t *testing.T) {
	t.Parallel()
	script := &scriptedProvider{charges: []string{"refuse", "lost"}}
	e := servicetest.New(t, withScript(script))
	if r := e.Post("k-1", servicetest.Body()); r.Status != http.StatusServiceUnavailable {
		t.Fatalf("T0: %d %s", r.Status, r.Body)
	}
	e.Clock.Advance(25 * time.Hour)
	if r := e.Post("k-1", servicetest.Body()); r.Status != http.StatusAccepted {
		t.Fatalf("T0+25h: %d %s", r.Status, r.Body)
	}
	// The provider never saw the key (the request was lost on its way):
	// the lookup says so, and inside the window the payment is sent again.
	r := e.Post("k-1", servicetest.Body())
	if r.Status != http.StatusCreated {
		t.Fatalf("retry: %d %s, want 201 (sent again inside the provider's window)", r.Status, r.Body)
	}
	e.AssertChargedOnce(e.OnlyPaymentID())
}

// A 202 shows the updatedAt the database holds, also when the retry changed
// nothing.
func TestA202ShowsTheUpdatedAtTheDatabaseHolds(t *testing.T) {
	t.Parallel()
	script := &scriptedProvider{charges: []string{"lost"}, lookup: []string{"lost"}}
	e := servicetest.New(t, withScript(script))
	first := e.Post("k-1", servicetest.Body())
	if first.Status != http.StatusAccepted {
		t.Fatalf("got %d %s", first.Status, first.Body)
	}
	e.Clock.Advance(time.Minute)
	again := e.Post("k-1", servicetest.Body()) // takes over, the lookup cannot say: nothing moves
	if again.Status != http.StatusAccepted {
		t.Fatalf("retry: %d %s", again.Status, again.Body)
	}
	got := e.Get(servicetest.SecretA, "/payments/"+e.OnlyPaymentID()).JSON(t)["updatedAt"]
	if again.JSON(t)["updatedAt"] != got || first.JSON(t)["updatedAt"] != got {
		t.Errorf("updatedAt: first 202 %v, second 202 %v, database %v", first.JSON(t)["updatedAt"], again.JSON(t)["updatedAt"], got)
	}
}

// A payment that never moved money (the provider refused it, and its client
// vanished) holds its invoice only until the replay window ends: then the
// reconciler cancels it, once the provider confirms it holds nothing, which
// frees the merchant reference and gives its key a stored final answer.
// Nothing is ever charged. (A payment whose client died right after its claim
// is not abandoned: the claim moved it on to sent, and the reconciler finds
// out; see TestCrashAtEveryBoundary...)
func TestAnAbandonedPaymentIsCanceledAndFreesItsInvoice(t *testing.T) {
	t.Parallel()
	e := servicetest.New(t)
	refused := servicetest.Body("paymentMethod", `"pm_sim_unavailable"`)
	if r := e.Post("k-gone", refused); r.Status != http.StatusServiceUnavailable {
		t.Fatalf("the refused request answered %d %s", r.Status, r.Body)
	}
	gone := e.OnlyPaymentID()
	if r := e.Post("k-new", servicetest.Body()); r.Status != http.StatusConflict || r.JSON(t)["code"] != "DUPLICATE_MERCHANT_REFERENCE" {
		t.Fatalf("new key, same invoice, inside the window: %d %s", r.Status, r.Body)
	}
	if stats, _ := e.Core.Reconciler.RunOnce(context.Background(), 10); stats[payments.OutcomeCanceled] != 0 {
		t.Fatalf("the reconciler canceled a payment inside its window: %v", stats)
	}

	e.Clock.Advance(e.Config.ReplayTTL + time.Minute)
	stats, err := e.Core.Reconciler.RunOnce(context.Background(), 10)
	if err != nil || stats[payments.OutcomeCanceled] != 1 {
		t.Fatalf("reconciler after the window: %v %v", stats, err)
	}
	if s := e.PaymentState(gone); s != payments.StateCanceled {
		t.Errorf("abandoned payment %s, want CANCELED", s)
	}
	if n := len(e.Sim.Charges()); n != 0 {
		t.Errorf("an abandoned payment was sent: %d charges", n)
	}
	// Its key answers from a stored final answer, byte for byte.
	first := e.Post("k-gone", refused)
	again := e.Post("k-gone", refused)
	if first.Status != http.StatusConflict || first.JSON(t)["code"] != "PAYMENT_CANCELED" || first.JSON(t)["paymentId"] != gone ||
		string(again.Body) != string(first.Body) || again.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("the abandoned key: %d %s / %s", first.Status, first.Body, again.Header.Get("Idempotent-Replayed"))
	}
	// The invoice is free again.
	if r := e.Post("k-new", servicetest.Body()); r.Status != http.StatusCreated {
		t.Errorf("new key, same invoice, after the cancellation: %d %s", r.Status, r.Body)
	}
	if g := e.Get(servicetest.SecretA, "/payments/"+gone).JSON(t); g["status"] != "CANCELED" {
		t.Errorf("GET the canceled payment: %v", g["status"])
	}
}

// A refused payment nobody retried is canceled too, after the provider
// confirms it never saw it.
func TestAnAbandonedRefusedPaymentIsLookedUpThenCanceled(t *testing.T) {
	t.Parallel()
	e := servicetest.New(t)
	if r := e.Post("k-1", servicetest.Body("paymentMethod", `"pm_sim_unavailable"`)); r.Status != http.StatusServiceUnavailable {
		t.Fatalf("got %d %s", r.Status, r.Body)
	}
	e.Clock.Advance(e.Config.ReplayTTL + time.Minute)
	stats, err := e.Core.Reconciler.RunOnce(context.Background(), 10)
	if err != nil || stats[payments.OutcomeCanceled] != 1 {
		t.Fatalf("reconciler: %v %v", stats, err)
	}
	if s := e.PaymentState(e.OnlyPaymentID()); s != payments.StateCanceled {
		t.Errorf("payment %s, want CANCELED", s)
	}
	if r := e.Post("k-2", servicetest.Body()); r.Status != http.StatusCreated {
		t.Errorf("the invoice after the cancellation: %d %s", r.Status, r.Body)
	}
}
