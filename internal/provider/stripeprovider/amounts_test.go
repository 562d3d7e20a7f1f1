package stripeprovider_test

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/provider"
	"github.com/paymentsapi/paymentsapi/internal/provider/providertest"
)

// iskIntent is intent(id, status, key) as Stripe renders one of ISK 100:
// ISK has two decimals in Stripe's API, so its amount is 10000, received
// in full once succeeded.
func iskIntent(id, status, key string) map[string]any {
	pi := intent(id, status, key)
	pi["currency"], pi["amount"] = "isk", 10000
	if status == "succeeded" {
		pi["amount_received"] = 10000
	}
	return pi
}

// chargeOf is the charge request of these tests for amountMinor of
// currency, in the service's unit (ISO 4217 minor units).
func chargeOf(amountMinor int64, currency string) provider.ChargeRequest {
	req := chargeReq()
	req.AmountMinor, req.Currency = amountMinor, currency
	return req
}

// The service counts ISK in whole kronur (ISO 4217: no decimals); Stripe
// counts it with two. ISK 100 leaves as amount=10000, and every amount
// Stripe answers, in a charge, a lookup, a capture or a refund, comes back
// divided by 100.
func TestISKTravelsInStripesTwoDecimalUnitBothWays(t *testing.T) {
	ctx := providertest.Context(t, 5*time.Second)
	f := newFake(t)
	p := f.provider(t)

	f.Create = answer(http.StatusOK, iskIntent("pi_isk", "succeeded", testKey))
	ch, err := p.Charge(ctx, chargeOf(100, "ISK"))
	if err != nil {
		t.Fatalf("Charge: %v", err)
	}
	if got := f.requests()[0].Form; got.Get("amount") != "10000" || got.Get("currency") != "isk" {
		t.Errorf("Stripe was sent amount=%s currency=%s, want amount=10000 currency=isk (ISK 100)", got.Get("amount"), got.Get("currency"))
	}
	if ch.AmountMinor != 100 || ch.AmountCapturedMinor != 100 || ch.Currency != "ISK" {
		t.Errorf("Charge = %+v, want ISK 100 charged and received", ch)
	}

	f.List = answer(http.StatusOK, intentList(false, iskIntent("pi_isk", "succeeded", testKey)))
	if ch, err := p.Lookup(ctx, providertest.ChargeLookup(testKey)); err != nil || ch.AmountMinor != 100 || ch.AmountCapturedMinor != 100 {
		t.Errorf("Lookup = %+v, %v; want ISK 100", ch, err)
	}

	refund := providertest.RefundRequest(refundKey, "pi_isk", 40)
	refund.Currency = "ISK"
	rf := stripeRefund("re_isk", "succeeded", refundKey)
	rf["amount"], rf["currency"], rf["payment_intent"] = 4000, "isk", "pi_isk"
	f.CreateRefund = answer(http.StatusOK, rf)
	got, err := p.Refund(ctx, refund)
	if err != nil {
		t.Fatalf("Refund: %v", err)
	}
	if sent := f.requests()[len(f.requests())-1].Form.Get("amount"); sent != "4000" {
		t.Errorf("the refund of ISK 40 was sent as amount=%s, want 4000", sent)
	}
	if got.AmountMinor != 40 {
		t.Errorf("Refund = %+v, want ISK 40", got)
	}

	captured := manualIntent("pi_isk", "succeeded", testKey, 7000)
	captured["currency"], captured["amount"] = "isk", 10000
	f.Capture = answer(http.StatusOK, captured)
	capture := providertest.CaptureRequest("paymentsapi:cap_1", "pi_isk", 70)
	capture.Currency = "ISK"
	cch, err := p.Capture(ctx, capture)
	if err != nil {
		t.Fatalf("Capture: %v", err)
	}
	if sent := f.requests()[len(f.requests())-1].Form.Get("amount_to_capture"); sent != "7000" {
		t.Errorf("the capture of ISK 70 was sent as amount_to_capture=%s, want 7000", sent)
	}
	if cch.AmountMinor != 100 || cch.AmountCapturedMinor != 70 {
		t.Errorf("Capture = %+v, want ISK 70 captured of 100", cch)
	}
}

// Stripe refuses a BHD, JOD, KWD, OMR or TND amount whose last digit is
// not 0. The adapter refuses it first: Check says so before anything is
// stored, and a charge, refund or capture of it is never sent.
func TestThreeDecimalAmountsStripeWouldRefuseAreNeverSent(t *testing.T) {
	ctx := providertest.Context(t, 5*time.Second)
	f := newFake(t)
	f.answerCreates(answer(http.StatusOK, intent("pi_sent", "succeeded", testKey))) // reached only if sent
	p := f.provider(t)

	var refused *provider.Refusal
	err := p.Check(provider.Proposal{AmountMinor: 1234, Currency: "BHD", PaymentMethod: "pm_card_visa"})
	if !errors.As(err, &refused) || refused.Reason != provider.RefusedAmount ||
		refused.Detail != "BHD card amounts must end in 0: 1.230 or 1.240, not 1.234" {
		t.Errorf("Check(BHD 1.234) = %v, want the amount refused with what Stripe takes", err)
	}
	if err := p.Check(provider.Proposal{AmountMinor: 1230, Currency: "BHD", PaymentMethod: "pm_card_vsia"}); err != nil {
		t.Errorf("Check(BHD 1.230, an unknown method) = %v: Stripe decides about methods, and takes the amount", err)
	}

	_, err = p.Charge(ctx, chargeOf(1234, "BHD"))
	if !errors.As(err, &refused) {
		t.Errorf("Charge(BHD 1.234) = %v, want a *provider.Refusal", err)
	}
	providertest.WantOnly(t, "Charge(BHD 1.234)", err, nil)
	refund := providertest.RefundRequest(refundKey, "pi_1", 5124)
	refund.Currency = "KWD"
	if _, err := p.Refund(ctx, refund); !errors.As(err, &refused) {
		t.Errorf("Refund(KWD 5.124) = %v, want a *provider.Refusal", err)
	}
	capture := providertest.CaptureRequest("paymentsapi:cap_1", "pi_1", 1001)
	capture.Currency = "OMR"
	if _, err := p.Capture(ctx, capture); !errors.As(err, &refused) {
		t.Errorf("Capture(OMR 1.001) = %v, want a *provider.Refusal", err)
	}
	if reqs := f.requests(); len(reqs) != 0 {
		t.Fatalf("%d requests reached Stripe (first %s %s amount=%s), want none", len(reqs), reqs[0].Method, reqs[0].Path, reqs[0].Form.Get("amount"))
	}

	pi := intent("pi_bhd", "succeeded", testKey)
	pi["currency"], pi["amount"], pi["amount_received"] = "bhd", 1230, 1230
	f.Create = answer(http.StatusOK, pi)
	ch, err := p.Charge(ctx, chargeOf(1230, "BHD"))
	if err != nil || ch.AmountMinor != 1230 {
		t.Fatalf("Charge(BHD 1.230) = %+v, %v", ch, err)
	}
	if sent := f.requests()[0].Form.Get("amount"); sent != "1230" {
		t.Errorf("BHD 1.230 was sent as amount=%s, want 1230 (three decimals, as ISO 4217)", sent)
	}
}

// An amount Stripe answers that is no whole number of the service's unit
// (ISK 100.50) cannot be told in it: the answer is ambiguous, for a
// person, never read as some amount.
func TestAnAmountNoWholeNumberOfTheServiceUnitIsAmbiguous(t *testing.T) {
	f := newFake(t)
	pi := iskIntent("pi_isk", "succeeded", testKey)
	pi["amount"], pi["amount_received"] = 10050, 10050
	f.Create = answer(http.StatusOK, pi)
	_, err := f.provider(t).Charge(providertest.Context(t, 5*time.Second), chargeOf(100, "ISK"))
	providertest.WantOnly(t, "Charge answered ISK 100.50", err, provider.ErrAmbiguous)
}
