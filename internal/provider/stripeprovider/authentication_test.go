package stripeprovider_test

import (
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/provider"
	"github.com/paymentsapi/paymentsapi/internal/provider/providertest"
)

// The customer's authentication (3-D Secure): what Charge sends when the
// service can take the customer back, and how a PaymentIntent waiting for
// its customer reads in answers, lookups and voids.

const (
	challengeURL = "https://hooks.stripe.com/3d_secure_2/hosted?merchant=acct_1&payment_intent=pi_3ds"
	returnURL    = "https://pay.example/payments/pay_1/return"
)

// authenticationReq is chargeReq with the service's return route.
func authenticationReq() provider.ChargeRequest {
	req := chargeReq()
	req.ReturnURL = returnURL
	return req
}

// requiresAction is a PaymentIntent waiting for its customer with next as
// its next_action (none if nil).
func requiresAction(id, key string, next map[string]any) map[string]any {
	pi := intent(id, "requires_action", key)
	if next != nil {
		pi["next_action"] = next
	}
	return pi
}

// redirectTo is a next_action that sends the customer to u.
func redirectTo(u string) map[string]any {
	return map[string]any{"type": "redirect_to_url", "redirect_to_url": map[string]any{"url": u, "return_url": returnURL}}
}

func TestChargeWithAReturnURLSendsItAndAnswersTheRedirect(t *testing.T) {
	for _, manual := range []bool{false, true} {
		t.Run(fmt.Sprintf("manual=%v", manual), func(t *testing.T) {
			f := newFake(t)
			pi := requiresAction("pi_3ds", testKey, redirectTo(challengeURL))
			if manual {
				pi["capture_method"] = "manual"
			}
			f.Create = answer(http.StatusOK, pi)
			req := authenticationReq()
			req.CaptureManual = manual
			got, err := f.provider(t).Charge(providertest.Context(t, 5*time.Second), req)
			want := provider.Charge{ID: "pi_3ds", IdempotencyKey: testKey, Status: provider.StatusRequiresAction,
				AmountMinor: 1000, Currency: "EUR", NextActionURL: challengeURL}
			if err != nil || got != want {
				t.Errorf("Charge = %+v, %v; want %+v", got, err, want)
			}
			reqs := f.requests()
			if len(reqs) != 1 {
				t.Fatalf("%d requests, want 1", len(reqs))
			}
			form := url.Values{
				"amount":                             {"1000"},
				"currency":                           {"eur"},
				"payment_method":                     {"pm_card_visa"},
				"confirm":                            {"true"},
				"automatic_payment_methods[enabled]": {"true"},
				"automatic_payment_methods[allow_redirects]": {"always"},
				"return_url":                {returnURL},
				"description":               {"order 7"},
				"metadata[idempotency_key]": {testKey},
				"metadata[payment_id]":      {"pay_1"},
			}
			if manual {
				form.Set("capture_method", "manual")
			}
			checkForm(t, reqs[0], http.MethodPost, "/v1/payment_intents", form, testKey)
		})
	}
}

// A PaymentIntent waiting for an action that is no redirect waits all the
// same (Void cancels it once the customer's time runs out), and nothing in
// it is taken for the customer's way to the challenge.
func TestChargeRequiresActionWithoutARedirectHasNoURL(t *testing.T) {
	for name, next := range map[string]map[string]any{
		"use_stripe_sdk": {"type": "use_stripe_sdk", "use_stripe_sdk": map[string]any{
			"type": "three_d_secure_redirect", "stripe_js": challengeURL, "source": "src_1"}},
		"a voucher to show": {"type": "oxxo_display_details", "oxxo_display_details": map[string]any{
			"hosted_voucher_url": challengeURL, "number": "12345678901234657890123456789012", "expires_after": 1700086400}},
		"no next_action":                    nil,
		"redirect_to_url without a url":     {"type": "redirect_to_url", "redirect_to_url": map[string]any{"return_url": returnURL}},
		"redirect_to_url to a relative url": redirectTo("/3d_secure_2/hosted"),
		"redirect_to_url to a script":       redirectTo("javascript:alert(1)"),
		"another type with a redirect":      {"type": "use_stripe_sdk", "redirect_to_url": map[string]any{"url": challengeURL}},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFake(t)
			f.Create = answer(http.StatusOK, requiresAction("pi_3ds", testKey, next))
			got, err := f.provider(t).Charge(providertest.Context(t, 5*time.Second), authenticationReq())
			want := provider.Charge{ID: "pi_3ds", IdempotencyKey: testKey, Status: provider.StatusRequiresAction, AmountMinor: 1000, Currency: "EUR"}
			if err != nil || got != want {
				t.Errorf("Charge = %+v, %v; want %+v (no NextActionURL)", got, err, want)
			}
		})
	}
}

// Lookup (the reconciler's, the webhook's and the customer's return) reads
// a PaymentIntent waiting for its customer as Charge does, and what the
// authentication ended in; the audit's listing too.
func TestLookupOfAChargeWaitingForItsCustomer(t *testing.T) {
	base := provider.Charge{ID: "pi_3ds", IdempotencyKey: testKey, AmountMinor: 1000, Currency: "EUR"}
	waiting, failed, authenticated, authorized := base, base, base, base
	waiting.Status, waiting.NextActionURL = provider.StatusRequiresAction, challengeURL
	failed.Status, failed.DeclineCode = provider.StatusDeclined, "authentication_failed"
	authenticated.Status, authenticated.AmountCapturedMinor = provider.StatusSucceeded, 1000
	authorized.Status = provider.StatusAuthorized
	failedPI := withLastPaymentError(intent("pi_3ds", "requires_payment_method", testKey), "payment_intent_authentication_failure", "")
	failedPI["last_payment_error"].(map[string]any)["type"] = "invalid_request_error"
	for name, tc := range map[string]struct {
		pi   map[string]any
		want provider.Charge
	}{
		"waiting":               {requiresAction("pi_3ds", testKey, redirectTo(challengeURL)), waiting},
		"authentication failed": {failedPI, failed},
		"authenticated":         {intent("pi_3ds", "succeeded", testKey), authenticated},
		"authenticated, manual": {manualIntent("pi_3ds", "requires_capture", testKey, 0), authorized},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFake(t)
			f.List = answer(http.StatusOK, intentList(false, intent("pi_other", "requires_action", "paymentsapi:pay_2"), tc.pi))
			p := f.provider(t)
			ctx := providertest.Context(t, 5*time.Second)
			got, err := p.Lookup(ctx, lookupOf(testKey))
			if err != nil || got != tc.want {
				t.Errorf("Lookup = %+v, %v; want %+v", got, err, tc.want)
			}
			listed, err := p.ListCharges(ctx, notBefore)
			if err != nil || len(listed) != 2 {
				t.Fatalf("ListCharges = %+v, %v; want 2 charges", listed, err)
			}
			if l := listed[1]; l.Status != tc.want.Status || l.NextActionURL != tc.want.NextActionURL || l.DeclineCode != tc.want.DeclineCode {
				t.Errorf("ListCharges lists %+v, want it as Lookup finds it, %+v", l, tc.want)
			}
			if l := listed[0]; l.Status != provider.StatusRequiresAction || l.NextActionURL != "" {
				t.Errorf("ListCharges lists %+v, want requires_action without a URL", l)
			}
		})
	}
}

// The abandonment of a payment whose customer never authenticated voids
// its PaymentIntent, still requires_action, made with automatic capture or
// manual: Stripe cancels it, and Void answers it canceled. Should the
// customer have authenticated first, the void is refused, and says so.
func TestVoidCancelsAChargeWaitingForItsCustomer(t *testing.T) {
	for name, pi := range map[string]map[string]any{
		"automatic": intent("pi_1", "canceled", "k"),
		"manual":    manualIntent("pi_1", "canceled", "k", 0),
	} {
		t.Run(name, func(t *testing.T) {
			f := newFake(t)
			f.Get = answer(http.StatusOK, requiresAction("pi_1", "k", redirectTo(challengeURL)))
			f.Cancel = answer(http.StatusOK, pi)
			p := f.provider(t)
			ctx := providertest.Context(t, 5*time.Second)
			before, err := p.GetCharge(ctx, "pi_1")
			if err != nil || before.Status != provider.StatusRequiresAction || before.NextActionURL != challengeURL {
				t.Errorf("GetCharge = %+v, %v; want it waiting for its customer", before, err)
			}
			req := voidReq()
			req.Reason = "abandoned"
			got, err := p.Void(ctx, req)
			want := provider.Charge{ID: "pi_1", IdempotencyKey: "k", Status: provider.StatusCanceled, AmountMinor: 1000, Currency: "EUR"}
			if err != nil || got != want {
				t.Errorf("Void = %+v, %v; want %+v", got, err, want)
			}
			checkForm(t, f.requests()[1], http.MethodPost, "/v1/payment_intents/pi_1/cancel", url.Values{"cancellation_reason": {"abandoned"}}, voidKey)
		})
	}
	f := newFake(t)
	f.Cancel = answer(http.StatusBadRequest, unexpectedState(intent("pi_1", "succeeded", "k")))
	got, err := f.provider(t).Void(providertest.Context(t, 5*time.Second), voidReq())
	if err != nil || got.Status != provider.StatusDeclined || got.DeclineCode != "charge_already_captured" {
		t.Errorf("Void of a PaymentIntent authenticated first = %+v, %v; want declined charge_already_captured", got, err)
	}
}

// TestStripeMockRequiresAction runs Charge, Lookup and Void against
// stripe-mock with a fixture of a PaymentIntent waiting for its customer
// behind a redirect: stripe-mock checks the request against Stripe's
// OpenAPI spec (return_url, allow_redirects=always) and answers the create
// with the fixture (its id made up, amount and currency reflected),
// lists the fixture, and answers a cancel with it too (it is stateless).
func TestStripeMockRequiresAction(t *testing.T) {
	bin := stripeMockBin(t)
	req := authenticationReq()
	req.AmountMinor = 1234
	base := startStripeMock(t, bin, writeFixtures(t, map[string]any{
		"payment_intent": map[string]any{
			"id":              "pi_fixture3ds",
			"object":          "payment_intent",
			"amount":          1,
			"currency":        "usd",
			"created":         1700000000,
			"livemode":        false,
			"status":          "requires_action",
			"amount_received": 0,
			"capture_method":  "automatic",
			"next_action":     redirectTo(challengeURL),
			"metadata":        map[string]string{"idempotency_key": req.IdempotencyKey, "payment_id": req.PaymentID},
		},
	}))
	p, rec := stripeMockProvider(t, base)
	ctx := providertest.Context(t, 10*time.Second)

	ch, err := p.Charge(ctx, req)
	if err != nil {
		t.Fatalf("Charge: %v", err)
	}
	if ch.ID == "" || ch.Status != provider.StatusRequiresAction || ch.NextActionURL != challengeURL ||
		ch.AmountMinor != 1234 || ch.Currency != "EUR" || ch.IdempotencyKey != req.IdempotencyKey || ch.AmountCapturedMinor != 0 {
		t.Errorf("Charge = %+v, want requires_action of 1234 EUR, NextActionURL %s", ch, challengeURL)
	}
	found, err := p.Lookup(ctx, provider.ChargeLookup{IdempotencyKey: req.IdempotencyKey, NotBefore: time.Now().Add(-time.Hour)})
	want := provider.Charge{ID: "pi_fixture3ds", IdempotencyKey: req.IdempotencyKey, Status: provider.StatusRequiresAction,
		AmountMinor: 1, Currency: "USD", NextActionURL: challengeURL}
	if err != nil || found != want {
		t.Errorf("Lookup = %+v, %v; want %+v", found, err, want)
	}

	reqs := rec.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want a create and a listing", len(reqs))
	}
	create := reqs[0]
	for k, v := range map[string]string{
		"return_url": returnURL,
		"automatic_payment_methods[allow_redirects]": "always",
		"confirm":        "true",
		"payment_method": "pm_card_visa",
	} {
		if got := create.Form[k]; len(got) != 1 || got[0] != v {
			t.Errorf("create: form %s = %q, want %q", k, got, v)
		}
	}
}
