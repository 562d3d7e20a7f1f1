package stripeprovider_test

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/provider"
	"github.com/paymentsapi/paymentsapi/internal/provider/providertest"
)

// The listings of the audit (provider.Listing), against stripe-mock: GET
// /v1/payment_intents and GET /v1/refunds with created[gte] and a page
// size, each object with the key its metadata carries and its creation
// time.
func TestListingsWireFormat(t *testing.T) {
	bin := stripeMockBin(t)
	base := startStripeMock(t, bin, writeFixtures(t, map[string]any{
		"payment_intent": map[string]any{
			"id": "pi_listed", "object": "payment_intent", "amount": 1200, "currency": "eur",
			"created": 1700000000, "livemode": false, "status": "succeeded", "amount_received": 1200,
			"capture_method": "automatic", "last_payment_error": nil,
			"metadata": map[string]string{"idempotency_key": "paymentsapi:pay_1", "payment_id": "pay_1"},
		},
		"refund": map[string]any{
			"id": "re_listed", "object": "refund", "amount": 300, "currency": "eur",
			"created": 1700000001, "status": "succeeded", "payment_intent": "pi_listed",
			"metadata": map[string]string{"idempotency_key": refundKey, "refund_id": "re_1"},
		},
	}))
	p, rec := stripeMockProvider(t, base)
	ctx := providertest.Context(t, 10*time.Second)
	since := time.Unix(1690000000, 0)

	charges, err := p.ListCharges(ctx, since)
	if err != nil {
		t.Fatal(err)
	}
	if len(charges) != 1 || charges[0].ID != "pi_listed" || charges[0].IdempotencyKey != "paymentsapi:pay_1" ||
		charges[0].Status != provider.StatusSucceeded || charges[0].AmountMinor != 1200 || charges[0].Currency != "EUR" ||
		!charges[0].CreatedAt.Equal(time.Unix(1700000000, 0)) {
		t.Errorf("ListCharges = %+v, want the fixture with its key", charges)
	}
	refunds, err := p.ListRefunds(ctx, since)
	if err != nil {
		t.Fatal(err)
	}
	if len(refunds) != 1 || refunds[0].ID != "re_listed" || refunds[0].IdempotencyKey != refundKey ||
		refunds[0].ChargeID != "pi_listed" || refunds[0].AmountMinor != 300 || !refunds[0].CreatedAt.Equal(time.Unix(1700000001, 0)) {
		t.Errorf("ListRefunds = %+v, want the fixture with its key", refunds)
	}

	reqs := rec.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want one listing of each", len(reqs))
	}
	for i, path := range []string{"/v1/payment_intents", "/v1/refunds"} {
		r := reqs[i]
		if r.Method != http.MethodGet || r.Path != path {
			t.Errorf("request = %s %s, want GET %s", r.Method, r.Path, path)
		}
		want := map[string]string{"created[gte]": strconv.FormatInt(since.Unix(), 10), "limit": "100"}
		for k, v := range want {
			if got := r.Query[k]; len(got) != 1 || got[0] != v {
				t.Errorf("%s query %s = %q, want %q", path, k, got, v)
			}
		}
		if len(r.Query) != len(want) {
			t.Errorf("%s query %v, want only %v", path, r.Query, want)
		}
	}
}
