package client_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/client"
	"github.com/paymentsapi/paymentsapi/internal/apitest"
	"github.com/paymentsapi/paymentsapi/internal/provider/sim"
)

// The tests in this file run manual capture and cancel against the real
// API, in-process (see package apitest).

// authorized creates a manual payment of 10.00 EUR with method and checks
// that it waits for its capture.
func authorized(t *testing.T, c *client.Client, reference, method string) client.Payment {
	t.Helper()
	req := payment(reference, method)
	req.CaptureMethod = client.CaptureManual
	res, err := c.CreatePayment(context.Background(), req)
	if err != nil {
		t.Fatalf("manual payment with %s: %v", method, err)
	}
	p := res.Payment
	if res.StatusCode != 201 || p.Status != client.PaymentRequiresCapture || p.CaptureMethod != client.CaptureManual ||
		p.CapturableAmount != "10.00" || p.AuthorizationExpiresAt == nil || p.CapturedAmount != "" {
		t.Fatalf("manual payment: %d %+v, want 201 REQUIRES_CAPTURE with capturableAmount 10.00 and authorizationExpiresAt", res.StatusCode, p)
	}
	if !p.AuthorizationExpiresAt.After(p.CreatedAt) {
		t.Errorf("authorizationExpiresAt %s is not after createdAt %s", p.AuthorizationExpiresAt, p.CreatedAt)
	}
	return p
}

// theCharge fails t unless the provider holds exactly one charge for the
// payment, and returns it.
func theCharge(t *testing.T, s *apitest.Server, paymentID string) sim.ChargeRecord {
	t.Helper()
	charges := s.Charges(paymentID)
	if len(charges) != 1 {
		t.Fatalf("provider charges of %s: %+v, want one", paymentID, charges)
	}
	return charges[0]
}

// wantProblem fails t unless err is an *Error with status and code (a
// *DeclinedError exactly when status is 402), and returns it.
func wantProblem(t *testing.T, err error, status int, code client.Code) *client.Error {
	t.Helper()
	var p *client.Error
	if !errors.As(err, &p) || p.Status != status || p.Code != code {
		t.Fatalf("error %v, want %d %s", err, status, code)
	}
	var declined *client.DeclinedError
	if errors.As(err, &declined) != (status == 402) {
		t.Errorf("DeclinedError only for a 402: %v", err)
	}
	return p
}

func TestServerCaptureInFullAndInPart(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{})
	c, rec := serverClient(t, s.URL, s.Secret)
	ctx := context.Background()

	// Partial: 8.00 of 10.00, then the same key again: the stored answer.
	part := authorized(t, c, "inv-part", "pm_card_visa")
	if ch := theCharge(t, s, part.PaymentID); ch.Status != "requires_capture" || ch.AmountCapturedMinor != 0 {
		t.Errorf("the provider's charge before the capture: %+v", ch)
	}
	res, err := c.CapturePayment(ctx, part.PaymentID, client.CapturePaymentRequest{Amount: "8.00"}, client.WithIdempotencyKey("cap-part"))
	if err != nil {
		t.Fatal(err)
	}
	p := res.Payment
	if res.StatusCode != 200 || res.Replayed || res.Attempts != 1 || p.PaymentID != part.PaymentID ||
		p.Status != client.PaymentSucceeded || p.CapturedAmount != "8.00" || p.Amount != "10.00" || p.CapturableAmount != "" {
		t.Fatalf("partial capture: %+v %+v", res.Outcome, p)
	}
	if res.Location != "/payments/"+part.PaymentID {
		t.Errorf("Location %q", res.Location)
	}
	again, err := c.CapturePayment(ctx, part.PaymentID, client.CapturePaymentRequest{Amount: "8.00"}, client.WithIdempotencyKey("cap-part"))
	if err != nil {
		t.Fatal(err)
	}
	if again.StatusCode != 200 || !again.Replayed || again.Payment.CapturedAmount != "8.00" {
		t.Errorf("the same capture again: %+v %+v, want the replayed 200", again.Outcome, again.Payment)
	}
	if ch := theCharge(t, s, part.PaymentID); ch.Status != "succeeded" || ch.AmountCaptured != "8.00" || ch.CaptureRequestCount != 1 {
		t.Errorf("the provider's charge after the capture: %+v, want succeeded, 8.00 captured, one capture request", ch)
	}
	// Another amount under the same key is another command.
	_, err = c.CapturePayment(ctx, part.PaymentID, client.CapturePaymentRequest{Amount: "7.00"}, client.WithIdempotencyKey("cap-part"))
	wantProblem(t, err, 422, client.CodeIdempotencyKeyReused)
	// One capture per payment: a second one, under a new key, is refused.
	_, err = c.CapturePayment(ctx, part.PaymentID, client.CapturePaymentRequest{Amount: "2.00"})
	wantProblem(t, err, 409, client.CodePaymentNotCapturable)
	got, err := c.GetPayment(ctx, part.PaymentID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != client.PaymentSucceeded || got.CapturedAmount != "8.00" || got.CaptureMethod != client.CaptureManual {
		t.Errorf("GetPayment after the capture: %+v", got)
	}
	// Refunds apply to what was captured.
	_, err = c.CreateRefund(ctx, part.PaymentID, client.CreateRefundRequest{Amount: "8.01"})
	if p := wantProblem(t, err, 409, client.CodeRefundExceedsRefundable); p.RefundableAmount != "8.00" {
		t.Errorf("refundableAmount %q, want 8.00", p.RefundableAmount)
	}

	// Full: no amount captures all that is capturable.
	full := authorized(t, c, "inv-full", "pm_card_mastercard")
	res, err = c.CapturePayment(ctx, full.PaymentID, client.CapturePaymentRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != 200 || res.Payment.Status != client.PaymentSucceeded || res.Payment.CapturedAmount != "10.00" {
		t.Errorf("full capture: %+v %+v", res.Outcome, res.Payment)
	}
	if res.IdempotencyKey == "" {
		t.Error("no key generated for the capture")
	}
	if ch := theCharge(t, s, full.PaymentID); ch.AmountCaptured != "10.00" {
		t.Errorf("the provider captured %s, want 10.00", ch.AmountCaptured)
	}

	// More than is capturable, and the payments that are not waiting for
	// a capture.
	over := authorized(t, c, "inv-over", "pm_card_visa")
	_, err = c.CapturePayment(ctx, over.PaymentID, client.CapturePaymentRequest{Amount: "10.01"})
	if p := wantProblem(t, err, 409, client.CodeCaptureExceedsCapturable); p.CapturableAmount != "10.00" {
		t.Errorf("capturableAmount %q, want 10.00", p.CapturableAmount)
	}
	_, err = c.CapturePayment(ctx, over.PaymentID, client.CapturePaymentRequest{Amount: "1.001"})
	if p := wantProblem(t, err, 400, client.CodeValidationFailed); len(p.Errors) == 0 || p.Errors[0].Field != "amount" {
		t.Errorf("errors %+v, want amount", p.Errors)
	}
	auto, err := c.CreatePayment(ctx, payment("inv-auto", "pm_card_visa"))
	if err != nil {
		t.Fatal(err)
	}
	if a := auto.Payment; a.CaptureMethod != client.CaptureAutomatic || a.CapturedAmount != "10.00" || a.AuthorizationExpiresAt != nil || a.CapturableAmount != "" {
		t.Errorf("automatic payment: %+v, want captureMethod automatic and capturedAmount 10.00", a)
	}
	_, err = c.CapturePayment(ctx, auto.Payment.PaymentID, client.CapturePaymentRequest{})
	wantProblem(t, err, 409, client.CodePaymentNotCapturable)
	_, err = c.CapturePayment(ctx, "pay_unknown", client.CapturePaymentRequest{})
	wantProblem(t, err, 404, client.CodeNotFound)

	// Every refusal above was final: no call was made twice.
	for _, x := range rec.exchanges() {
		if x.status == 0 || x.status >= 500 || x.status == 202 {
			t.Errorf("exchange %+v", x)
		}
	}
}

func TestServerCaptureDeclinedIsADecline(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{})
	c, rec := serverClient(t, s.URL, s.Secret)
	ctx := context.Background()
	p := authorized(t, c, "inv-1", "pm_sim_capture_declined")
	before := len(rec.exchanges())
	_, err := c.CapturePayment(ctx, p.PaymentID, client.CapturePaymentRequest{}, client.WithIdempotencyKey("cap-1"))
	var declined *client.DeclinedError
	if !errors.As(err, &declined) {
		t.Fatalf("error %v, want a DeclinedError", err)
	}
	if d := declined.Problem; d.Status != 402 || d.Code != client.CodeCaptureDeclined || d.PaymentID != p.PaymentID || d.DeclineCode == "" {
		t.Errorf("problem %+v, want 402 CAPTURE_DECLINED with paymentId and declineCode", d)
	}
	if n := len(rec.exchanges()) - before; n != 1 {
		t.Errorf("%d attempts, want 1: a decline is final", n)
	}
	// Stored: the same request is answered the same decline.
	_, again := c.CapturePayment(ctx, p.PaymentID, client.CapturePaymentRequest{}, client.WithIdempotencyKey("cap-1"))
	if !errors.As(again, &declined) || declined.Problem.Code != client.CodeCaptureDeclined {
		t.Errorf("the same capture again: %v, want the stored decline", again)
	}
	if ch := theCharge(t, s, p.PaymentID); ch.AmountCapturedMinor != 0 {
		t.Errorf("the provider captured %s after declining", ch.AmountCaptured)
	}
}

func TestServerCancel(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{})
	c, _ := serverClient(t, s.URL, s.Secret)
	ctx := context.Background()

	p := authorized(t, c, "inv-1", "pm_card_visa")
	res, err := c.CancelPayment(ctx, p.PaymentID, client.CancelPaymentRequest{Reason: client.CancelRequestedByCustomer}, client.WithIdempotencyKey("cxl-1"))
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != 200 || res.Payment.Status != client.PaymentCanceled || res.Payment.CapturedAmount != "" || res.Payment.CapturableAmount != "" {
		t.Fatalf("cancel: %+v %+v, want 200 CANCELED", res.Outcome, res.Payment)
	}
	again, err := c.CancelPayment(ctx, p.PaymentID, client.CancelPaymentRequest{Reason: client.CancelRequestedByCustomer}, client.WithIdempotencyKey("cxl-1"))
	if err != nil {
		t.Fatal(err)
	}
	if !again.Replayed || again.StatusCode != 200 || again.Payment.Status != client.PaymentCanceled {
		t.Errorf("the same cancel again: %+v, want the replayed 200", again.Outcome)
	}
	_, err = c.CancelPayment(ctx, p.PaymentID, client.CancelPaymentRequest{Reason: client.CancelDuplicate}, client.WithIdempotencyKey("cxl-1"))
	wantProblem(t, err, 422, client.CodeIdempotencyKeyReused)
	if ch := theCharge(t, s, p.PaymentID); ch.Status != "canceled" || ch.AmountCapturedMinor != 0 || ch.VoidRequestCount != 1 {
		t.Errorf("the provider's charge: %+v, want canceled, nothing captured, one void request", ch)
	}

	// Never both captured and canceled.
	_, err = c.CapturePayment(ctx, p.PaymentID, client.CapturePaymentRequest{})
	wantProblem(t, err, 409, client.CodePaymentNotCapturable)
	_, err = c.CancelPayment(ctx, p.PaymentID, client.CancelPaymentRequest{})
	wantProblem(t, err, 409, client.CodePaymentNotCancelable)
	captured := authorized(t, c, "inv-2", "pm_card_visa")
	if _, err := c.CapturePayment(ctx, captured.PaymentID, client.CapturePaymentRequest{}); err != nil {
		t.Fatal(err)
	}
	_, err = c.CancelPayment(ctx, captured.PaymentID, client.CancelPaymentRequest{})
	wantProblem(t, err, 409, client.CodePaymentNotCancelable)
	_, err = c.CancelPayment(ctx, captured.PaymentID, client.CancelPaymentRequest{Reason: "because"})
	wantProblem(t, err, 400, client.CodeValidationFailed)
	_, err = c.CancelPayment(ctx, "pay_unknown", client.CancelPaymentRequest{})
	wantProblem(t, err, 404, client.CodeNotFound)

	// A canceled payment frees its merchant reference.
	req := payment("inv-1", "pm_card_visa")
	if _, err := c.CreatePayment(ctx, req); err != nil {
		t.Errorf("a new payment for the canceled one's reference: %v", err)
	}
}

func TestServerCaptureLostAnswerIsReplayedUnderTheSameKey(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{})
	direct, _ := serverClient(t, s.URL, s.Secret)
	p := authorized(t, direct, "inv-1", "pm_card_visa")

	lp := &lossyProxy{}
	proxy := httptest.NewServer(lp.handler(t, s.URL))
	proxy.Config.SetKeepAlivesEnabled(false) // see newScripted
	t.Cleanup(proxy.Close)
	c, _ := serverClient(t, proxy.URL, s.Secret)
	res, err := c.CapturePayment(context.Background(), p.PaymentID, client.CapturePaymentRequest{Amount: "6.00"})
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != 200 || !res.Replayed || res.Attempts != 2 || res.Payment.CapturedAmount != "6.00" {
		t.Errorf("outcome %+v %+v, want the replayed 200 on the second attempt", res.Outcome, res.Payment)
	}
	lp.mu.Lock()
	keys := lp.keys
	lp.mu.Unlock()
	if len(keys) != 2 || keys[0] != res.IdempotencyKey || keys[1] != res.IdempotencyKey {
		t.Errorf("the API got keys %q, want %q twice", keys, res.IdempotencyKey)
	}
	if ch := theCharge(t, s, p.PaymentID); ch.CaptureRequestCount != 1 || ch.AmountCaptured != "6.00" {
		t.Errorf("the provider's charge: %+v, want one capture request of 6.00", ch)
	}
}

func TestServerCaptureOutcomeUnknownIsRetriedUntilKnown(t *testing.T) {
	t.Parallel()
	// The provider captures but its answer is lost: the API answers 202
	// after 300 ms; the client retries under the same key after
	// Retry-After, and the retry learns the outcome from the provider.
	s := apitest.Start(t, apitest.Options{ProviderTimeout: 300 * time.Millisecond})
	c, rec := serverClient(t, s.URL, s.Secret)
	p := authorized(t, c, "inv-1", "pm_sim_capture_timeout_after_success")
	before := len(rec.exchanges())
	res, err := c.CapturePayment(context.Background(), p.PaymentID, client.CapturePaymentRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != 200 || res.Attempts < 2 || res.Payment.Status != client.PaymentSucceeded || res.Payment.CapturedAmount != "10.00" {
		t.Errorf("outcome %+v %+v, want 200 SUCCEEDED after a 202", res.Outcome, res.Payment)
	}
	seen := rec.exchanges()[before:]
	if len(seen) == 0 || seen[0].status != 202 {
		t.Errorf("exchanges %+v, want a 202 first", seen)
	}
	for _, x := range seen {
		if x.key != res.IdempotencyKey {
			t.Errorf("an attempt carried key %q, want %q", x.key, res.IdempotencyKey)
		}
	}
	if ch := theCharge(t, s, p.PaymentID); ch.CaptureRequestCount != 1 || ch.AmountCaptured != "10.00" {
		t.Errorf("the provider's charge: %+v, want one capture request", ch)
	}
}
