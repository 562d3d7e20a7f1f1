package stripeprovider_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/provider"
	"github.com/paymentsapi/paymentsapi/internal/provider/providertest"
	"github.com/paymentsapi/paymentsapi/internal/provider/stripeprovider"
)

const (
	captureKey = "paymentsapi:cap_1"
	voidKey    = "paymentsapi:can_1"
)

// captureReq is the capture request of these tests: 8.00 EUR of pi_1.
func captureReq() provider.CaptureRequest {
	return providertest.CaptureRequest(captureKey, "pi_1", 800)
}

func voidReq() provider.VoidRequest {
	return providertest.VoidRequest(voidKey, "pi_1")
}

// unexpectedState is Stripe's refusal of a capture or cancel of a
// PaymentIntent in the wrong status, carrying the PaymentIntent.
func unexpectedState(pi map[string]any) map[string]any {
	e := stripeError("invalid_request_error", "payment_intent_unexpected_state", "", "This PaymentIntent could not be captured because it has a status of ...")
	if pi != nil {
		e["error"].(map[string]any)["payment_intent"] = pi
	}
	return e
}

// checkForm fails the test unless r is method path with exactly form and
// the idempotency key key (none if empty).
func checkForm(t *testing.T, r request, method, path string, form url.Values, key string) {
	t.Helper()
	if r.Method != method || r.Path != path {
		t.Errorf("request = %s %s, want %s %s", r.Method, r.Path, method, path)
	}
	if fmt.Sprint(r.Form) != fmt.Sprint(form) {
		t.Errorf("form = %v\nwant   %v", r.Form, form)
	}
	if h := r.Header.Get("Idempotency-Key"); h != key {
		t.Errorf("Idempotency-Key = %q, want %q", h, key)
	}
}

func TestAuthorizeWireFormat(t *testing.T) {
	f := newFake(t)
	f.Create = answer(http.StatusOK, manualIntent("pi_1", "requires_capture", testKey, 0))
	req := providertest.AuthorizeRequest(testKey, "pm_card_visa")
	got, err := f.provider(t).Charge(providertest.Context(t, 5*time.Second), req)
	want := provider.Charge{ID: "pi_1", IdempotencyKey: testKey, Status: provider.StatusAuthorized, AmountMinor: 1000, Currency: "EUR"}
	if err != nil || got != want {
		t.Errorf("Charge = %+v, %v; want %+v", got, err, want)
	}
	reqs := f.requests()
	if len(reqs) != 1 || reqs[0].Form.Get("capture_method") != "manual" || reqs[0].Form.Get("confirm") != "true" {
		t.Fatalf("requests = %+v, want one create with capture_method=manual", reqs)
	}
}

func TestCaptureWireFormatAndAnswers(t *testing.T) {
	f := newFake(t)
	f.Capture = answer(http.StatusOK, manualIntent("pi_1", "succeeded", "paymentsapi:pay_1", 800))
	got, err := f.provider(t).Capture(providertest.Context(t, 5*time.Second), captureReq())
	want := provider.Charge{ID: "pi_1", IdempotencyKey: "paymentsapi:pay_1", Status: provider.StatusSucceeded, AmountMinor: 1000, Currency: "EUR", AmountCapturedMinor: 800}
	if err != nil || got != want {
		t.Errorf("Capture = %+v, %v; want %+v", got, err, want)
	}
	reqs := f.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests, want 1", len(reqs))
	}
	checkForm(t, reqs[0], http.MethodPost, "/v1/payment_intents/pi_1/capture", url.Values{"amount_to_capture": {"800"}}, captureKey)
	if h := reqs[0].Header.Get("Authorization"); h != "Bearer sk_test_fake" {
		t.Errorf("Authorization = %q", h)
	}
}

func TestCaptureAnswersThatLeaveTheOutcomeUnknown(t *testing.T) {
	other := manualIntent("pi_2", "succeeded", "paymentsapi:pay_1", 800)
	for name, pi := range map[string]map[string]any{
		"still requires_capture":          manualIntent("pi_1", "requires_capture", "k", 0),
		"processing":                      manualIntent("pi_1", "processing", "k", 0),
		"canceled":                        manualIntent("pi_1", "canceled", "k", 0),
		"succeeded but received 0":        manualIntent("pi_1", "succeeded", "k", 0),
		"another PaymentIntent":           other,
		"an answer that is not an intent": {"id": "pi_1", "object": "charge", "status": "succeeded"},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFake(t)
			f.Capture = answer(http.StatusOK, pi)
			_, err := f.provider(t).Capture(providertest.Context(t, 5*time.Second), captureReq())
			providertest.WantOnly(t, "Capture", err, provider.ErrUnknownOutcome)
		})
	}
}

func TestCaptureRefusals(t *testing.T) {
	cardError := stripeError("card_error", "card_declined", "do_not_honor", "Your card was declined.")
	for name, tc := range map[string]struct {
		status int
		body   map[string]any
		want   provider.Charge
	}{
		"402 card_error": {http.StatusPaymentRequired, cardError,
			provider.Charge{DeclineCode: "do_not_honor"}},
		"unexpected state, canceled": {http.StatusBadRequest, unexpectedState(manualIntent("pi_1", "canceled", "k", 0)),
			provider.Charge{DeclineCode: "charge_canceled", IdempotencyKey: "k", AmountMinor: 1000, Currency: "EUR"}},
		"unexpected state, captured": {http.StatusBadRequest, unexpectedState(manualIntent("pi_1", "succeeded", "k", 600)),
			provider.Charge{DeclineCode: "charge_already_captured", IdempotencyKey: "k", AmountMinor: 1000, Currency: "EUR", AmountCapturedMinor: 600}},
		"unexpected state, automatic and captured": {http.StatusBadRequest, unexpectedState(intent("pi_1", "succeeded", "k")),
			provider.Charge{DeclineCode: "charge_already_captured", IdempotencyKey: "k", AmountMinor: 1000, Currency: "EUR", AmountCapturedMinor: 1000}},
		"unexpected state, processing": {http.StatusBadRequest, unexpectedState(manualIntent("pi_1", "processing", "k", 0)),
			provider.Charge{DeclineCode: "payment_intent_unexpected_state", IdempotencyKey: "k", AmountMinor: 1000, Currency: "EUR"}},
		"unexpected state, no intent": {http.StatusBadRequest, unexpectedState(nil),
			provider.Charge{DeclineCode: "payment_intent_unexpected_state"}},
		"unexpected state of another intent": {http.StatusBadRequest, unexpectedState(manualIntent("pi_2", "canceled", "k", 0)),
			provider.Charge{DeclineCode: "payment_intent_unexpected_state"}},
		"authorization expired": {http.StatusBadRequest, stripeError("invalid_request_error", "charge_expired_for_capture", "", "expired"),
			provider.Charge{DeclineCode: "charge_expired_for_capture"}},
		"amount too large": {http.StatusBadRequest, stripeError("invalid_request_error", "amount_too_large", "", "too large"),
			provider.Charge{DeclineCode: "amount_too_large"}},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFake(t)
			f.Capture = answer(tc.status, tc.body)
			got, err := f.provider(t).Capture(providertest.Context(t, 5*time.Second), captureReq())
			want := tc.want
			want.ID, want.Status = "pi_1", provider.StatusDeclined
			if err != nil || got != want {
				t.Errorf("Capture = %+v, %v; want %+v", got, err, want)
			}
		})
	}
	// Another refusal is Stripe rejecting the request: an *APIError.
	f := newFake(t)
	f.Capture = answer(http.StatusBadRequest, stripeError("invalid_request_error", "parameter_invalid_integer", "", "bad amount"))
	_, err := f.provider(t).Capture(providertest.Context(t, 5*time.Second), captureReq())
	providertest.WantOnly(t, "Capture", err, nil)
	var apiErr *stripeprovider.APIError
	if !errors.As(err, &apiErr) || apiErr.Code != "parameter_invalid_integer" {
		t.Errorf("err = %v, want an *APIError parameter_invalid_integer", err)
	}
}

func TestVoidWireFormatAndAnswers(t *testing.T) {
	for _, tc := range []struct {
		name   string
		reason string
		pi     map[string]any
	}{
		{"manual", "requested_by_customer", manualIntent("pi_1", "canceled", "k", 0)},
		{"abandoned", "abandoned", manualIntent("pi_1", "canceled", "k", 0)},
		{"no reason", "", manualIntent("pi_1", "canceled", "k", 0)},
		// A PaymentIntent made with automatic capture and canceled before
		// it succeeded: voided all the same.
		{"automatic", "duplicate", intent("pi_1", "canceled", "k")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t)
			f.Cancel = answer(http.StatusOK, tc.pi)
			req := voidReq()
			req.Reason = tc.reason
			got, err := f.provider(t).Void(providertest.Context(t, 5*time.Second), req)
			want := provider.Charge{ID: "pi_1", IdempotencyKey: "k", Status: provider.StatusCanceled, AmountMinor: 1000, Currency: "EUR"}
			if err != nil || got != want {
				t.Errorf("Void = %+v, %v; want %+v", got, err, want)
			}
			form := url.Values{}
			if tc.reason != "" {
				form.Set("cancellation_reason", tc.reason)
			}
			reqs := f.requests()
			if len(reqs) != 1 {
				t.Fatalf("%d requests, want 1", len(reqs))
			}
			checkForm(t, reqs[0], http.MethodPost, "/v1/payment_intents/pi_1/cancel", form, voidKey)
		})
	}
}

func TestVoidRefusalsAndUnknownAnswers(t *testing.T) {
	for name, tc := range map[string]struct {
		status int
		body   map[string]any
		want   provider.Charge
	}{
		"unexpected state, captured": {http.StatusBadRequest, unexpectedState(manualIntent("pi_1", "succeeded", "k", 1000)),
			provider.Charge{Status: provider.StatusDeclined, DeclineCode: "charge_already_captured", IdempotencyKey: "k", AmountMinor: 1000, Currency: "EUR", AmountCapturedMinor: 1000}},
		"unexpected state, canceled already": {http.StatusBadRequest, unexpectedState(manualIntent("pi_1", "canceled", "k", 0)),
			provider.Charge{Status: provider.StatusCanceled, IdempotencyKey: "k", AmountMinor: 1000, Currency: "EUR"}},
		"unexpected state, processing": {http.StatusBadRequest, unexpectedState(manualIntent("pi_1", "processing", "k", 0)),
			provider.Charge{Status: provider.StatusDeclined, DeclineCode: "payment_intent_unexpected_state", IdempotencyKey: "k", AmountMinor: 1000, Currency: "EUR"}},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFake(t)
			f.Cancel = answer(tc.status, tc.body)
			got, err := f.provider(t).Void(providertest.Context(t, 5*time.Second), voidReq())
			want := tc.want
			want.ID = "pi_1"
			if err != nil || got != want {
				t.Errorf("Void = %+v, %v; want %+v", got, err, want)
			}
		})
	}
	for name, pi := range map[string]map[string]any{
		"still requires_capture": manualIntent("pi_1", "requires_capture", "k", 0),
		"succeeded":              manualIntent("pi_1", "succeeded", "k", 1000),
		"another PaymentIntent":  manualIntent("pi_2", "canceled", "k", 0),
	} {
		f := newFake(t)
		f.Cancel = answer(http.StatusOK, pi)
		_, err := f.provider(t).Void(providertest.Context(t, 5*time.Second), voidReq())
		providertest.WantOnly(t, "Void answered "+name, err, provider.ErrUnknownOutcome)
	}
	// A card error is no refusal of a void: Stripe rejected the request.
	f := newFake(t)
	f.Cancel = answer(http.StatusPaymentRequired, stripeError("card_error", "card_declined", "", "declined"))
	_, err := f.provider(t).Void(providertest.Context(t, 5*time.Second), voidReq())
	providertest.WantOnly(t, "Void answered a card error", err, nil)
}

func TestGetCharge(t *testing.T) {
	for name, tc := range map[string]struct {
		pi   map[string]any
		want provider.Charge
	}{
		"authorized": {manualIntent("pi_1", "requires_capture", "k", 0),
			provider.Charge{Status: provider.StatusAuthorized}},
		"captured in part": {manualIntent("pi_1", "succeeded", "k", 600),
			provider.Charge{Status: provider.StatusSucceeded, AmountCapturedMinor: 600}},
		"voided": {manualIntent("pi_1", "canceled", "k", 0),
			provider.Charge{Status: provider.StatusCanceled}},
		"automatic, succeeded": {intent("pi_1", "succeeded", "k"),
			provider.Charge{Status: provider.StatusSucceeded, AmountCapturedMinor: 1000}},
		"automatic, canceled": {intent("pi_1", "canceled", "k"),
			provider.Charge{Status: provider.StatusDeclined, DeclineCode: "canceled"}},
		"declined": {withLastPaymentError(manualIntent("pi_1", "requires_payment_method", "k", 0), "card_declined", "generic_decline"),
			provider.Charge{Status: provider.StatusDeclined, DeclineCode: "generic_decline"}},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFake(t)
			f.Get = answer(http.StatusOK, tc.pi)
			got, err := f.provider(t).GetCharge(providertest.Context(t, 5*time.Second), "pi_1")
			want := tc.want
			want.ID, want.IdempotencyKey, want.AmountMinor, want.Currency = "pi_1", "k", 1000, "EUR"
			if err != nil || got != want {
				t.Errorf("GetCharge = %+v, %v; want %+v", got, err, want)
			}
			reqs := f.requests()
			if len(reqs) != 1 || reqs[0].Method != http.MethodGet || reqs[0].Path != "/v1/payment_intents/pi_1" ||
				len(reqs[0].Query) != 0 || reqs[0].Header.Get("Idempotency-Key") != "" {
				t.Errorf("requests = %+v, want one GET /v1/payment_intents/pi_1 without query or key", reqs)
			}
		})
	}
}

func TestGetChargeErrors(t *testing.T) {
	for name, tc := range map[string]struct {
		h    http.HandlerFunc
		want error
	}{
		"404 resource_missing": {answer(http.StatusNotFound, stripeError("invalid_request_error", "resource_missing", "", "No such payment_intent: 'pi_1'")), provider.ErrNotFound},
		"404 HTML":             {answerRaw(http.StatusNotFound, "text/html", "<html>not found</html>"), nil},
		"404 another code":     {answer(http.StatusNotFound, stripeError("invalid_request_error", "", "", "Unrecognized request URL")), nil},
		"processing":           {answer(http.StatusOK, manualIntent("pi_1", "processing", "k", 0)), provider.ErrUnknownOutcome},
		"another intent":       {answer(http.StatusOK, manualIntent("pi_2", "requires_capture", "k", 0)), provider.ErrUnknownOutcome},
		"500":                  {answer(http.StatusInternalServerError, stripeError("api_error", "", "", "boom")), provider.ErrUnknownOutcome},
		"429":                  {answer(http.StatusTooManyRequests, stripeError("invalid_request_error", "rate_limit", "", "slow down")), provider.ErrUnavailable},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFake(t)
			f.Get = tc.h
			_, err := f.provider(t).GetCharge(providertest.Context(t, 5*time.Second), "pi_1")
			providertest.WantOnly(t, "GetCharge", err, tc.want)
		})
	}
}

func TestInvalidCapturesAndVoidsAreNotSent(t *testing.T) {
	f := newFake(t)
	p := f.provider(t)
	ctx := providertest.Context(t, 5*time.Second)
	for name, mutate := range map[string]func(*provider.CaptureRequest){
		"no key":          func(r *provider.CaptureRequest) { r.IdempotencyKey = "" },
		"key with spaces": func(r *provider.CaptureRequest) { r.IdempotencyKey = " k" },
		"no charge":       func(r *provider.CaptureRequest) { r.ChargeID = "" },
		"zero amount":     func(r *provider.CaptureRequest) { r.AmountMinor = 0 },
		"bad currency":    func(r *provider.CaptureRequest) { r.Currency = "EURO" },
	} {
		req := captureReq()
		mutate(&req)
		_, err := p.Capture(ctx, req)
		providertest.WantOnly(t, "Capture with "+name, err, nil)
	}
	for name, mutate := range map[string]func(*provider.VoidRequest){
		"no key":         func(r *provider.VoidRequest) { r.IdempotencyKey = "" },
		"no charge":      func(r *provider.VoidRequest) { r.ChargeID = "" },
		"unknown reason": func(r *provider.VoidRequest) { r.Reason = "changed_mind" },
	} {
		req := voidReq()
		mutate(&req)
		_, err := p.Void(ctx, req)
		providertest.WantOnly(t, "Void with "+name, err, nil)
	}
	_, err := p.GetCharge(ctx, "")
	providertest.WantOnly(t, "GetCharge without id", err, nil)
	if n := len(f.requests()); n != 0 {
		t.Errorf("%d requests, want none", n)
	}
}

// TestStripeMockCapturesWireFormat runs Charge with CaptureManual, Capture,
// Void and GetCharge against a real stripe-mock, which validates each
// request against Stripe's OpenAPI spec. It is stateless: it answers every
// call on a PaymentIntent with its one fixture (id, metadata and status as
// the fixture says; amount, currency, capture_method and
// cancellation_reason reflected from the request when sent), so each
// fixture shows one status.
func TestStripeMockCapturesWireFormat(t *testing.T) {
	bin := stripeMockBin(t)
	fixture := func(id, status string, amountReceived int64) string {
		return writeFixtures(t, map[string]any{"payment_intent": map[string]any{
			"id": id, "object": "payment_intent", "amount": 1000, "amount_received": amountReceived,
			"currency": "eur", "created": 1700000000, "livemode": false, "status": status,
			"capture_method": "manual", "last_payment_error": nil,
			"metadata": map[string]string{"idempotency_key": testKey, "payment_id": "pay_1"},
		}})
	}

	t.Run("authorized", func(t *testing.T) {
		p, rec := stripeMockProvider(t, startStripeMock(t, bin, fixture("pi_authorized", "requires_capture", 0)))
		ctx := providertest.Context(t, 10*time.Second)
		req := providertest.AuthorizeRequest(testKey, "pm_card_visa")
		ch, err := p.Charge(ctx, req)
		if err != nil || !strings.HasPrefix(ch.ID, "pi_") || ch.Status != provider.StatusAuthorized || ch.AmountCapturedMinor != 0 {
			t.Errorf("Charge = %+v, %v; want an authorized pi_...", ch, err)
		}
		got, err := p.GetCharge(ctx, "pi_authorized")
		want := provider.Charge{ID: "pi_authorized", IdempotencyKey: testKey, Status: provider.StatusAuthorized, AmountMinor: 1000, Currency: "EUR"}
		if err != nil || got != want {
			t.Errorf("GetCharge = %+v, %v; want %+v", got, err, want)
		}
		// The fixture stays requires_capture whatever is asked: to a
		// capture or a cancel, that is an answer that settles nothing.
		_, err = p.Capture(ctx, providertest.CaptureRequest(captureKey, "pi_authorized", 800))
		providertest.WantOnly(t, "Capture answered requires_capture", err, provider.ErrUnknownOutcome)
		_, err = p.Void(ctx, providertest.VoidRequest(voidKey, "pi_authorized"))
		providertest.WantOnly(t, "Void answered requires_capture", err, provider.ErrUnknownOutcome)

		reqs := rec.requests()
		if len(reqs) != 4 {
			t.Fatalf("%d requests, want a create, a retrieve, a capture and a cancel", len(reqs))
		}
		if reqs[0].Path != "/v1/payment_intents" || reqs[0].Form.Get("capture_method") != "manual" || reqs[0].Form.Get("confirm") != "true" {
			t.Errorf("create = %+v, want capture_method=manual", reqs[0])
		}
		checkForm(t, reqs[1], http.MethodGet, "/v1/payment_intents/pi_authorized", nil, "")
		checkForm(t, reqs[2], http.MethodPost, "/v1/payment_intents/pi_authorized/capture", url.Values{"amount_to_capture": {"800"}}, captureKey)
		checkForm(t, reqs[3], http.MethodPost, "/v1/payment_intents/pi_authorized/cancel", url.Values{"cancellation_reason": {"requested_by_customer"}}, voidKey)
	})

	t.Run("captured", func(t *testing.T) {
		p, _ := stripeMockProvider(t, startStripeMock(t, bin, fixture("pi_captured", "succeeded", 800)))
		ctx := providertest.Context(t, 10*time.Second)
		got, err := p.Capture(ctx, providertest.CaptureRequest(captureKey, "pi_captured", 800))
		want := provider.Charge{ID: "pi_captured", IdempotencyKey: testKey, Status: provider.StatusSucceeded, AmountMinor: 1000, Currency: "EUR", AmountCapturedMinor: 800}
		if err != nil || got != want {
			t.Errorf("Capture = %+v, %v; want %+v", got, err, want)
		}
		if got, err := p.GetCharge(ctx, "pi_captured"); err != nil || got != want {
			t.Errorf("GetCharge = %+v, %v; want %+v", got, err, want)
		}
	})

	t.Run("voided", func(t *testing.T) {
		p, _ := stripeMockProvider(t, startStripeMock(t, bin, fixture("pi_voided", "canceled", 0)))
		ctx := providertest.Context(t, 10*time.Second)
		for _, reason := range []string{"requested_by_customer", "duplicate", "fraudulent", "abandoned", ""} {
			req := providertest.VoidRequest(voidKey, "pi_voided")
			req.Reason = reason
			got, err := p.Void(ctx, req)
			want := provider.Charge{ID: "pi_voided", IdempotencyKey: testKey, Status: provider.StatusCanceled, AmountMinor: 1000, Currency: "EUR"}
			if err != nil || got != want {
				t.Errorf("Void with reason %q = %+v, %v; want %+v", reason, got, err, want)
			}
		}
		got, err := p.GetCharge(ctx, "pi_voided")
		if err != nil || got.Status != provider.StatusCanceled {
			t.Errorf("GetCharge = %+v, %v; want canceled", got, err)
		}
	})
}
