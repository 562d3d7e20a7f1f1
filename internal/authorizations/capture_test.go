package authorizations_test

import (
	"bytes"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/paymentsapi/paymentsapi/internal/app"
	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/ledger"
	"github.com/paymentsapi/paymentsapi/internal/outbox"
	"github.com/paymentsapi/paymentsapi/internal/provider"
)

// A manual payment is only authorized: 201 REQUIRES_CAPTURE with what may be
// captured and until when, and the provider holds an uncaptured charge.
func TestManualPaymentIsOnlyAuthorized(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	r := e.pay("k1", "pm_card_visa", true)
	wantStatus(t, r, http.StatusCreated, "")
	body := r.json(t)
	if body["status"] != "REQUIRES_CAPTURE" || body["captureMethod"] != "manual" || body["capturableAmount"] != "10.00" {
		t.Fatalf("answer: %s", r)
	}
	if _, ok := body["capturedAmount"]; ok {
		t.Fatalf("an authorized payment shows a capturedAmount: %s", r)
	}
	want := e.clk.Now().Add(authTTL).Format(time.RFC3339Nano)
	if got, _ := body["authorizationExpiresAt"].(string); got != want {
		t.Fatalf("authorizationExpiresAt %q, want %q", got, want)
	}
	if c := e.charge(body["paymentId"].(string)); c.Status != provider.StatusAuthorized {
		t.Fatalf("the provider's charge is %s, want %s", c.Status, provider.StatusAuthorized)
	}
	// An automatic payment shows its captured amount once it succeeded.
	auto := e.pay("k2", "pm_card_visa", false).json(t)
	if auto["status"] != "SUCCEEDED" || auto["captureMethod"] != "automatic" || auto["capturedAmount"] != "10.00" {
		t.Fatalf("automatic payment: %v", auto)
	}
	// The capture method is part of the command.
	r = e.pay("k2", "pm_card_visa", true)
	wantStatus(t, r, http.StatusUnprocessableEntity, "IDEMPOTENCY_KEY_REUSED")
	if n := e.count("outbox_events WHERE event_type = 'PaymentAuthorized' AND aggregate_id = $1", body["paymentId"]); n != 1 {
		t.Fatalf("%d PaymentAuthorized events, want 1", n)
	}
}

// A capture takes the money once: 200 with the payment SUCCEEDED, replayed
// byte for byte; the payment can then be neither captured nor canceled.
func TestCaptureCapturesOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	id := e.authorized("pay-1", "pm_card_visa")

	r := e.capture(0, id, "cap-1", "")
	wantStatus(t, r, http.StatusOK, "")
	body := r.json(t)
	if body["status"] != "SUCCEEDED" || body["capturedAmount"] != "10.00" || body["paymentId"] != id {
		t.Fatalf("capture: %s", r)
	}
	if _, ok := body["capturableAmount"]; ok {
		t.Fatalf("a captured payment shows a capturableAmount: %s", r)
	}
	replay := e.capture(0, id, "cap-1", "")
	if replay.status != r.status || !bytes.Equal(replay.body, r.body) || replay.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay %s differs from %s", replay, r)
	}
	// The whole amount written out is the same command as no amount.
	if again := e.capture(0, id, "cap-1", `{"amount":"10.0"}`); again.status != http.StatusOK || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("same command, amount written out: %s", again)
	}
	wantStatus(t, e.capture(0, id, "cap-1", `{"amount":"5.00"}`), http.StatusUnprocessableEntity, "IDEMPOTENCY_KEY_REUSED")
	wantStatus(t, e.capture(0, id, "cap-2", ""), http.StatusConflict, "PAYMENT_NOT_CAPTURABLE")
	wantStatus(t, e.cancel(0, id, "cxl-1", ""), http.StatusConflict, "PAYMENT_NOT_CANCELABLE")

	c := e.charge(id)
	if c.Status != provider.StatusSucceeded || c.AmountCapturedMinor != 1000 || c.CaptureRequestCount != 1 {
		t.Fatalf("the provider's charge: %+v", c)
	}
	if n := e.count("outbox_events WHERE event_type = 'PaymentSucceeded' AND aggregate_id = $1", id); n != 1 {
		t.Fatalf("%d PaymentSucceeded events, want 1", n)
	}
}

// A partial capture releases the rest: the payment's refunds are limited to
// what was captured, and the ledger's event books the captured amount.
func TestPartialCaptureLimitsRefundsAndTheLedger(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	id := e.authorized("pay-1", "pm_card_visa")
	wantStatus(t, e.capture(0, id, "cap-1", `{"amount":"10.01"}`), http.StatusConflict, "CAPTURE_EXCEEDS_CAPTURABLE")
	if r := e.capture(0, id, "cap-0", `{"amount":"10.01"}`); r.json(t)["capturableAmount"] != "10.00" {
		t.Fatalf("exceeding capture: %s", r)
	}
	wantStatus(t, e.capture(0, id, "cap-2", `{"amount":"0"}`), http.StatusBadRequest, "VALIDATION_FAILED")
	r := e.capture(0, id, "cap-3", `{"amount":"8.00"}`)
	wantStatus(t, r, http.StatusOK, "")
	if r.json(t)["capturedAmount"] != "8.00" || r.json(t)["amount"] != "10.00" {
		t.Fatalf("partial capture: %s", r)
	}
	if c := e.charge(id); c.AmountCapturedMinor != 800 {
		t.Fatalf("the provider captured %d, want 800", c.AmountCapturedMinor)
	}
	refund := e.do(0, "POST", "/payments/"+id+"/refunds", "ref-1", `{"amount":"8.01"}`)
	wantStatus(t, refund, http.StatusConflict, "REFUND_EXCEEDS_REFUNDABLE")
	if refund.json(t)["refundableAmount"] != "8.00" {
		t.Fatalf("refundable: %s", refund)
	}
	wantStatus(t, e.do(0, "POST", "/payments/"+id+"/refunds", "ref-2", `{"amount":"8.00"}`), http.StatusCreated, "")
	var captured string
	if err := e.pool.QueryRow(t.Context(), `SELECT payload->>'capturedAmount' FROM outbox_events WHERE event_type = 'PaymentSucceeded' AND aggregate_id = $1`, id).Scan(&captured); err != nil {
		t.Fatal(err)
	}
	if captured != "8.00" {
		t.Fatalf("PaymentSucceeded's capturedAmount %q, want 8.00", captured)
	}
	// The ledger books the capture once, for what was captured, however
	// often the payment's events come.
	proj := ledger.NewProjector(ledger.Deps{DB: e.pool, Clock: e.clk, Log: slog.New(slog.DiscardHandler),
		Modules: app.Modules(app.Config{})}, "")
	rows, err := e.pool.Query(t.Context(), `SELECT id::text, event_type, aggregate_type, aggregate_id, created_at, payload
		FROM outbox_events WHERE aggregate_id = $1 ORDER BY created_at, id`, id)
	if err != nil {
		t.Fatal(err)
	}
	events, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (outbox.Event, error) {
		var ev outbox.Event
		err := row.Scan(&ev.ID, &ev.Type, &ev.AggregateType, &ev.AggregateID, &ev.OccurredAt, &ev.Payload)
		return ev, err
	})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		for _, ev := range events {
			if _, err := proj.Apply(t.Context(), ev); err != nil {
				t.Fatalf("ledger: %s: %v", ev.Type, err)
			}
		}
	}
	var entries, minor int64
	if err := e.pool.QueryRow(t.Context(), `SELECT count(*), COALESCE(sum(amount_minor), 0) FROM ledger_entries
		WHERE payment_id = $1 AND entry_type = 'PAYMENT_SUCCEEDED'`, id).Scan(&entries, &minor); err != nil {
		t.Fatal(err)
	}
	if entries != 1 || minor != 800 {
		t.Fatalf("the ledger booked %d entries of %d in all for the payment, want one of 800 (%d events)", entries, minor, len(events))
	}
}

// What may not be captured is refused and stores nothing.
func TestCaptureRefusals(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	auto := e.pay("auto", "pm_card_visa", false).json(t)["paymentId"].(string)
	wantStatus(t, e.capture(0, auto, "c1", ""), http.StatusConflict, "PAYMENT_NOT_CAPTURABLE")
	wantStatus(t, e.cancel(0, auto, "c1", ""), http.StatusConflict, "PAYMENT_NOT_CANCELABLE")
	declined := e.pay("declined", "pm_card_chargeDeclined", true)
	wantStatus(t, declined, http.StatusPaymentRequired, "PAYMENT_DECLINED")
	wantStatus(t, e.capture(0, declined.json(t)["paymentId"].(string), "c2", ""), http.StatusConflict, "PAYMENT_NOT_CAPTURABLE")
	wantStatus(t, e.capture(0, "pay_unknown", "c3", ""), http.StatusNotFound, "NOT_FOUND")

	id := e.authorized("manual", "pm_card_visa")
	other := e.do(0, "POST", "/payments/"+id+"/capture", "c4", "", "Authorization", "Bearer "+otherSecret)
	wantStatus(t, other, http.StatusNotFound, "NOT_FOUND")
	wantStatus(t, e.capture(0, id, "", ""), http.StatusBadRequest, "IDEMPOTENCY_KEY_MISSING")
	wantStatus(t, e.capture(0, id, "c5", `{"amount":"1.00","extra":1}`), http.StatusBadRequest, "VALIDATION_FAILED")
	wantStatus(t, e.capture(0, id, "c6", `{"amount":`), http.StatusBadRequest, "MALFORMED_JSON")
	wantStatus(t, e.cancel(0, id, "c7", `{"reason":"bored"}`), http.StatusBadRequest, "VALIDATION_FAILED")
	// None of that touched the authorization.
	if p := e.payment(id); p["status"] != "REQUIRES_CAPTURE" {
		t.Fatalf("payment after refusals: %v", p)
	}
	if n := e.count("idempotency_keys WHERE operation IN ('capture_payment', 'cancel_payment') AND NOT starts_with(idempotency_key, $1)", idempotency.ServiceKey("")); n != 0 {
		t.Fatalf("%d keys stored by refused requests", n)
	}

	// Past its authorizationExpiresAt an authorization is not captured;
	// it may still be canceled.
	e.clk.Advance(authTTL)
	wantStatus(t, e.capture(0, id, "c8", ""), http.StatusConflict, "AUTHORIZATION_EXPIRED")
	wantStatus(t, e.cancel(0, id, "c9", `{"reason":"abandoned"}`), http.StatusOK, "")
}

// A declined capture is stored and replayed (402); the authorization
// stands, and may then be canceled.
func TestDeclinedCapture(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	id := e.authorized("pay", "pm_sim_capture_declined")
	r := e.capture(0, id, "cap", "")
	wantStatus(t, r, http.StatusPaymentRequired, "CAPTURE_DECLINED")
	if b := r.json(t); b["paymentId"] != id || b["declineCode"] == "" {
		t.Fatalf("declined capture: %s", r)
	}
	replay := e.capture(0, id, "cap", "")
	if !bytes.Equal(replay.body, r.body) || replay.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay %s differs from %s", replay, r)
	}
	if p := e.payment(id); p["status"] != "REQUIRES_CAPTURE" {
		t.Fatalf("payment after a declined capture: %v", p)
	}
	wantStatus(t, e.cancel(0, id, "cxl", ""), http.StatusOK, "")
	if c := e.charge(id); c.Status != provider.StatusCanceled {
		t.Fatalf("the provider's charge: %+v", c)
	}
}

// A capture whose answer is lost answers 202 and is resolved by the
// reconciler, which asks the provider: one capture, and the key's retry
// gets the resolved answer.
func TestLostCaptureAnswerIsResolvedByTheReconciler(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{providerTimeout: 300 * time.Millisecond})
	id := e.authorized("pay", "pm_sim_capture_timeout_after_success")
	r := e.capture(0, id, "cap", `{"amount":"4.00"}`)
	wantStatus(t, r, http.StatusAccepted, "")
	if r.json(t)["status"] != "PROCESSING" || r.header.Get("Retry-After") == "" {
		t.Fatalf("lost capture: %s", r)
	}
	// Meanwhile the payment may be neither captured nor canceled again.
	wantStatus(t, e.capture(0, id, "cap-2", ""), http.StatusConflict, "PAYMENT_NOT_CAPTURABLE")
	wantStatus(t, e.cancel(0, id, "cxl", ""), http.StatusConflict, "PAYMENT_NOT_CANCELABLE")

	e.reconcile()
	if p := e.payment(id); p["status"] != "SUCCEEDED" || p["capturedAmount"] != "4.00" {
		t.Fatalf("payment after the reconciler: %v", p)
	}
	again := e.capture(0, id, "cap", `{"amount":"4.00"}`)
	wantStatus(t, again, http.StatusOK, "")
	if c := e.charge(id); c.CaptureRequestCount != 1 || c.AmountCapturedMinor != 400 {
		t.Fatalf("the provider's charge: %+v", c)
	}
	if n := e.count("outbox_events WHERE event_type = 'PaymentSucceeded' AND aggregate_id = $1", id); n != 1 {
		t.Fatalf("%d PaymentSucceeded events, want 1", n)
	}
}

// An empty body sent as application/json is no body: the whole amount is
// captured, the payment canceled without a reason (the same commands as
// with no body at all: their retries without one are replays).
func TestAnEmptyJSONBodyIsNoBody(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	emptyJSON := func(action, id, key string) response {
		return e.do(0, "POST", "/payments/"+id+"/"+action, key, "", "Content-Type", "application/json")
	}
	captured := e.authorized("pay-captured", "pm_card_visa")
	r := emptyJSON("capture", captured, "cap")
	wantStatus(t, r, http.StatusOK, "")
	if body := r.json(t); body["status"] != "SUCCEEDED" || body["capturedAmount"] != "10.00" {
		t.Fatalf("capture with an empty JSON body: %s", r)
	}
	if again := e.capture(0, captured, "cap", ""); again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the same capture without a body: %s", again)
	}
	canceled := e.authorized("pay-canceled", "pm_card_visa")
	r = emptyJSON("cancel", canceled, "cxl")
	wantStatus(t, r, http.StatusOK, "")
	if r.json(t)["status"] != "CANCELED" {
		t.Fatalf("cancel with an empty JSON body: %s", r)
	}
	if again := e.cancel(0, canceled, "cxl", ""); again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the same cancel without a body: %s", again)
	}
}

// A cancel voids the authorization: 200 CANCELED, stored; the merchant
// reference is free again.
func TestCancelVoidsTheAuthorization(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	id := e.authorized("pay", "pm_card_visa")
	r := e.cancel(0, id, "cxl", `{"reason":"requested_by_customer"}`)
	wantStatus(t, r, http.StatusOK, "")
	if r.json(t)["status"] != "CANCELED" {
		t.Fatalf("cancel: %s", r)
	}
	if replay := e.cancel(0, id, "cxl", `{"reason":"requested_by_customer"}`); !bytes.Equal(replay.body, r.body) {
		t.Fatalf("replay %s differs from %s", replay, r)
	}
	wantStatus(t, e.cancel(0, id, "cxl", ""), http.StatusUnprocessableEntity, "IDEMPOTENCY_KEY_REUSED")
	wantStatus(t, e.capture(0, id, "cap", ""), http.StatusConflict, "PAYMENT_NOT_CAPTURABLE")
	if c := e.charge(id); c.Status != provider.StatusCanceled || c.VoidRequestCount != 1 || c.AmountCapturedMinor != 0 {
		t.Fatalf("the provider's charge: %+v", c)
	}
	if n := e.count("outbox_events WHERE event_type = 'PaymentCanceled' AND aggregate_id = $1", id); n != 1 {
		t.Fatalf("%d PaymentCanceled events, want 1", n)
	}
	// The same invoice may be paid again under a new key.
	again := e.do(0, "POST", "/payments", "pay-again",
		`{"accountId":"acc_1","amount":"10.00","currency":"EUR","merchantReference":"inv-pay","paymentMethod":"pm_card_visa"}`)
	wantStatus(t, again, http.StatusCreated, "")
}
