package authorizations_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/payments"
	"github.com/paymentsapi/paymentsapi/internal/provider"
)

// A payment that was refused before processing (503) moved no money: a
// cancel ends it at once, 200 CANCELED, stored; its own key then answers
// PAYMENT_CANCELED, and its merchant reference is free.
func TestCancelOfARefusedPayment(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	refused := e.pay("pay", "pm_sim_unavailable", false)
	wantStatus(t, refused, http.StatusServiceUnavailable, "PROVIDER_UNAVAILABLE")
	var id string
	if err := e.pool.QueryRow(t.Context(), `SELECT id FROM payments`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	r := e.cancel(0, id, "cxl", "")
	wantStatus(t, r, http.StatusOK, "")
	if r.json(t)["status"] != "CANCELED" {
		t.Fatalf("cancel: %s", r)
	}
	if replay := e.cancel(0, id, "cxl", ""); replay.status != http.StatusOK || replay.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %s", replay)
	}
	wantStatus(t, e.pay("pay", "pm_sim_unavailable", false), http.StatusConflict, "PAYMENT_CANCELED")
	wantStatus(t, e.do(0, "POST", "/payments", "pay-again",
		`{"accountId":"acc_1","amount":"10.00","currency":"EUR","merchantReference":"inv-pay","paymentMethod":"pm_card_visa"}`),
		http.StatusCreated, "")
	if n := e.count("outbox_events WHERE event_type = 'PaymentCanceled' AND aggregate_id = $1", id); n != 1 {
		t.Fatalf("%d PaymentCanceled events, want 1", n)
	}
	// Nothing ever reached the provider, and the cancel sent nothing.
	for _, c := range e.sim.Charges() {
		if c.PaymentID == id {
			t.Fatalf("the provider holds %+v", c)
		}
	}
}

// refusesButCharges refuses the first charge of a payment with a 503 after
// the provider processed it: a refusal that hid a charge.
type refusesButCharges struct{ provider.Provider }

func (p refusesButCharges) Charge(ctx context.Context, req provider.ChargeRequest) (provider.Charge, error) {
	if _, err := p.Provider.Charge(ctx, req); err != nil {
		return provider.Charge{}, err
	}
	return provider.Charge{}, fmt.Errorf("%w: 503 after processing", provider.ErrUnavailable)
}

// A refused payment that the provider charged after all is never canceled:
// the cancel asks the provider first, settles the payment SUCCEEDED and
// answers 409 PAYMENT_NOT_CANCELABLE.
func TestCancelNeverCancelsAPaymentThatWasChargedAfterAll(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{wrap: func(p provider.Provider) provider.Provider { return refusesButCharges{p} }})
	wantStatus(t, e.pay("pay", "pm_card_visa", false), http.StatusServiceUnavailable, "PROVIDER_UNAVAILABLE")
	var id string
	if err := e.pool.QueryRow(t.Context(), `SELECT id FROM payments`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	r := e.cancel(0, id, "cxl", "")
	wantStatus(t, r, http.StatusConflict, "PAYMENT_NOT_CANCELABLE")
	if p := e.payment(id); p["status"] != "SUCCEEDED" {
		t.Fatalf("payment: %v", p)
	}
	if c := e.charge(id); c.Status != provider.StatusSucceeded {
		t.Fatalf("the provider's charge: %+v", c)
	}
	if n := e.count("outbox_events WHERE event_type = 'PaymentCanceled'"); n != 0 {
		t.Fatalf("%d PaymentCanceled events", n)
	}
}

// A payment whose client is sending it is in flight: 409
// PAYMENT_NOT_CANCELABLE, nothing stored. So is one whose client died right
// after the claim, even once its lease has run out: the claim moved it on
// to PROVIDER_REQUEST_SENT (providerflow.SendOnClaim), so a request may have
// left, and only the reconciler's lookup can tell. A payment the provider
// refused (no request moved money) is canceled, and its client's retry gets
// the cancellation, never a charge.
func TestCancelOfAPaymentInFlightThenOfARefusedOne(t *testing.T) {
	t.Parallel()
	var crashed atomic.Bool
	opts := envOptions{providerTimeout: 2 * time.Second, hooks: payments.Hooks{AfterClaim: func(context.Context, string) error {
		if crashed.CompareAndSwap(false, true) {
			return errors.New("crash after the claim")
		}
		return nil
	}}}
	e := newEnv(t, opts)
	if r := e.pay("pay", "pm_card_visa", false); r.status < 500 {
		t.Fatalf("the crashed request answered %s", r)
	}
	var id string
	if err := e.pool.QueryRow(t.Context(), `SELECT id FROM payments`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, e.cancel(0, id, "cxl-1", ""), http.StatusConflict, "PAYMENT_NOT_CANCELABLE")
	e.clk.Advance(lease(opts))
	wantStatus(t, e.cancel(0, id, "cxl-2", ""), http.StatusConflict, "PAYMENT_NOT_CANCELABLE")
	if p := e.payment(id); p["status"] != "PROCESSING" {
		t.Fatalf("payment after refused cancels: %v", p)
	}

	refused := e.pay("refused", "pm_sim_unavailable", false)
	wantStatus(t, refused, http.StatusServiceUnavailable, "PROVIDER_UNAVAILABLE")
	rid, _ := refused.json(t)["paymentId"].(string)
	if rid == "" {
		t.Fatalf("503 without a paymentId: %s", refused)
	}
	r := e.cancel(0, rid, "cxl-3", "")
	wantStatus(t, r, http.StatusOK, "")
	if r.json(t)["status"] != "CANCELED" {
		t.Fatalf("cancel: %s", r)
	}
	// The payment's client comes back: its key answers the cancellation,
	// and nothing is charged.
	wantStatus(t, e.pay("refused", "pm_sim_unavailable", false), http.StatusConflict, "PAYMENT_CANCELED")
	for _, c := range e.sim.Charges() {
		if c.PaymentID == rid {
			t.Fatalf("the provider holds %+v", c)
		}
	}
}
