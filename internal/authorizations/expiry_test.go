package authorizations_test

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/actor"
	"github.com/paymentsapi/paymentsapi/internal/provider"
	"github.com/paymentsapi/paymentsapi/internal/provider/simclient"
)

// An authorization nobody captured by its authorizationExpiresAt is voided
// by the service (the reconciler runs the void it scheduled for itself), and
// the payment ends CANCELED; one captured or canceled in time is left alone.
func TestExpiredAuthorizationIsVoided(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	expiring := e.authorized("expiring", "pm_card_visa")
	captured := e.authorized("captured", "pm_card_visa")
	canceled := e.authorized("canceled", "pm_card_visa")
	wantStatus(t, e.capture(0, captured, "cap", `{"amount":"3.00"}`), http.StatusOK, "")
	wantStatus(t, e.cancel(0, canceled, "cxl", ""), http.StatusOK, "")

	// Before the expiry the reconciler leaves them all alone.
	e.clk.Advance(authTTL - time.Minute)
	e.reconcile()
	if p := e.payment(expiring); p["status"] != "REQUIRES_CAPTURE" {
		t.Fatalf("before its expiry: %v", p)
	}
	if c := e.charge(expiring); c.VoidRequestCount != 0 {
		t.Fatalf("voided before its expiry: %+v", c)
	}

	e.clk.Advance(time.Minute)
	e.reconcile()
	if p := e.payment(expiring); p["status"] != "CANCELED" {
		t.Fatalf("after its expiry: %v", p)
	}
	if c := e.charge(expiring); c.Status != provider.StatusCanceled || c.VoidRequestCount != 1 {
		t.Fatalf("the provider's charge: %+v", c)
	}
	if n := e.count("outbox_events WHERE event_type = 'PaymentCanceled' AND aggregate_id = $1", expiring); n != 1 {
		t.Fatalf("%d PaymentCanceled events, want 1", n)
	}
	if p := e.payment(captured); p["status"] != "SUCCEEDED" || p["capturedAmount"] != "3.00" {
		t.Fatalf("the captured payment after the expiry: %v", p)
	}
	if c := e.charge(captured); c.VoidRequestCount != 0 {
		t.Fatalf("a captured payment was voided: %+v", c)
	}
	if c := e.charge(canceled); c.VoidRequestCount != 1 {
		t.Fatalf("a canceled payment was voided twice: %+v", c)
	}
	// Every scheduled void ended; nothing is left for the reconciler.
	if n := e.count("idempotency_keys WHERE operation = 'cancel_payment' AND response_status IS NULL"); n != 0 {
		t.Fatalf("%d unfinished cancel keys", n)
	}
	e.clk.Advance(time.Hour)
	e.reconcile()
	if c := e.charge(expiring); c.VoidRequestCount != 1 {
		t.Fatalf("voided again: %+v", c)
	}
}

// refusesFirstVoid refuses the first void before processing (503).
type refusesFirstVoid struct {
	provider.Provider
	done atomic.Bool
}

func (p *refusesFirstVoid) Void(ctx context.Context, req provider.VoidRequest) (provider.Charge, error) {
	if p.done.CompareAndSwap(false, true) {
		return provider.Charge{}, fmt.Errorf("%w: 503", provider.ErrUnavailable)
	}
	return p.Provider.Void(ctx, req)
}

// The expiry's void finds another action holding the authorization (a
// cancel the provider refused, whose client never comes back): it waits
// for that action to end instead of ending itself, so that when the cancel
// is abandoned and hands the authorization back after the expiry, the
// authorization is still voided (the money simulation found this case).
// (A refused capture no longer holds it past the expiry: it is declined
// there, TestACaptureIsNeverSentPastTheExpiry.)
func TestExpiryWaitsForAnActionThatHoldsTheAuthorization(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{wrap: func(p provider.Provider) provider.Provider { return &refusesFirstVoid{Provider: p} }})
	id := e.authorized("pay", "pm_card_visa")
	e.clk.Advance(authTTL - time.Hour)
	wantStatus(t, e.cancel(0, id, "cxl", ""), http.StatusServiceUnavailable, "PROVIDER_UNAVAILABLE")

	e.clk.Advance(time.Hour) // the expiry, with the cancel holding the authorization
	e.reconcile()
	if p := e.payment(id); p["status"] != "PROCESSING" {
		t.Fatalf("at the expiry: %v", p)
	}
	if c := e.charge(id); c.VoidRequestCount != 0 {
		t.Fatalf("voided while another action held the authorization: %+v", c)
	}
	for range 26 { // a day: the refused cancel is abandoned, the authorization handed back
		e.clk.Advance(time.Hour)
		e.reconcile()
	}
	if p := e.payment(id); p["status"] != "CANCELED" {
		t.Fatalf("a day after the expiry: %v, want CANCELED (voided)", p)
	}
	if c := e.charge(id); c.Status != provider.StatusCanceled || c.VoidRequestCount != 1 {
		t.Fatalf("the provider's charge: %+v", c)
	}
}

// A void that finds the charge captured at the provider (from its
// dashboard, or by a request of ours processed after all) settles the
// payment as captured, for what the provider took, with its event for the
// ledger: never back to REQUIRES_CAPTURE.
func TestAVoidThatFindsTheChargeCapturedSettlesIt(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	id := e.authorized("pay", "pm_card_visa")
	charge := e.charge(id)
	if _, err := simclient.New(e.simURL, nil).Capture(t.Context(), provider.CaptureRequest{
		IdempotencyKey: "dashboard-capture", ChargeID: charge.ID, AmountMinor: 700, Currency: "EUR", PaymentID: id,
	}); err != nil {
		t.Fatal(err)
	}
	r := e.cancel(0, id, "cxl", "")
	wantStatus(t, r, http.StatusConflict, "PAYMENT_NOT_CANCELABLE")
	if p := e.payment(id); p["status"] != "SUCCEEDED" || p["capturedAmount"] != "7.00" {
		t.Fatalf("payment: %v", p)
	}
	if n := e.count("outbox_events WHERE event_type = 'PaymentSucceeded' AND aggregate_id = $1", id); n != 1 {
		t.Fatalf("%d PaymentSucceeded events, want 1", n)
	}
}

// The void of an expired authorization is the service's own scheduled
// work: its moves name the scheduler, under a request id of their own,
// while the reconciler runs it.
func TestAnExpirysVoidNamesTheScheduler(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	id := e.authorized("expiring", "pm_card_visa")
	e.clk.Advance(authTTL)
	e.reconcile()
	if p := e.payment(id); p["status"] != "CANCELED" {
		t.Fatalf("after its expiry: %v", p)
	}
	var who, request string
	if err := e.pool.QueryRow(context.Background(), `SELECT coalesce(actor, ''), coalesce(request_id, '') FROM payment_transitions
		WHERE payment_id = $1 AND to_state = 'CANCELED'`, id).Scan(&who, &request); err != nil {
		t.Fatal(err)
	}
	if who != actor.Scheduler || request == "" {
		t.Errorf("the expiry's void: %q under %q, want %s under a request id of its own", who, request, actor.Scheduler)
	}
}
