package simclient_test

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/provider"
	"github.com/paymentsapi/paymentsapi/internal/provider/providertest"
	"github.com/paymentsapi/paymentsapi/internal/provider/sim"
	"github.com/paymentsapi/paymentsapi/internal/provider/simclient"
)

// charge charges 10.00 EUR with method under key, and fails the test unless
// the charge succeeded.
func charge(t *testing.T, c *simclient.Client, key, method string) provider.Charge {
	t.Helper()
	ch, err := c.Charge(providertest.Context(t, 5*time.Second), providertest.ChargeRequest(key, method))
	if err != nil || ch.Status != provider.StatusSucceeded {
		t.Fatalf("Charge %q = %+v, %v; want a success", key, ch, err)
	}
	return ch
}

func TestRefundSucceedsDeclinesAndReplays(t *testing.T) {
	s, c := newSim(t, sim.Options{})
	ctx := providertest.Context(t, 5*time.Second)
	ch := charge(t, c, "c1", sim.MethodVisa)

	got, err := c.Refund(ctx, providertest.RefundRequest("r1", ch.ID, 300))
	if err != nil {
		t.Fatalf("Refund: %v", err)
	}
	recs := s.Refunds()
	want := provider.Refund{ID: recs[0].ID, IdempotencyKey: "r1", ChargeID: ch.ID, Status: provider.StatusSucceeded, AmountMinor: 300, Currency: "EUR"}
	if got != want {
		t.Errorf("Refund = %+v, want %+v", got, want)
	}
	if recs[0].Reason != "requested_by_customer" || recs[0].RefundID != "re_1" {
		t.Errorf("the simulator recorded %+v, want the request's reason and refund id", recs[0])
	}
	again, err := c.Refund(ctx, providertest.RefundRequest("r1", ch.ID, 300))
	if err != nil || again != want {
		t.Errorf("retry = %+v, %v; want %+v", again, err, want)
	}

	for _, tc := range []struct {
		name, key, chargeID string
		amount              int64
		declineCode         string
	}{
		{"more than is left", "r2", ch.ID, 701, sim.DeclineAmountTooLarge},
		{"a method that declines refunds", "r3", charge(t, c, "c2", sim.MethodRefundDeclined).ID, 100, sim.DeclineRefund},
	} {
		rf, err := c.Refund(ctx, providertest.RefundRequest(tc.key, tc.chargeID, tc.amount))
		if err != nil {
			t.Fatalf("%s: a decline is not an error: %v", tc.name, err)
		}
		if rf.Status != provider.StatusDeclined || rf.DeclineCode != tc.declineCode || rf.ID == "" || rf.ChargeID != tc.chargeID {
			t.Errorf("%s: Refund = %+v, want declined %s", tc.name, rf, tc.declineCode)
		}
	}

	for _, l := range []provider.RefundLookup{{IdempotencyKey: "r1", ChargeID: ch.ID}, {IdempotencyKey: "r1"}} {
		if found, err := c.LookupRefund(ctx, l); err != nil || found != want {
			t.Errorf("LookupRefund(%+v) = %+v, %v; want %+v", l, found, err, want)
		}
	}
	if recs := s.Refunds(); len(recs) != 3 || recs[0].RequestCount != 2 || recs[0].LookupCount != 2 {
		t.Errorf("Refunds() = %+v, want 3, the first requested twice and looked up twice", recs)
	}
}

func TestRefundLostAnswerIsUnknownOutcome(t *testing.T) {
	s, c := newSim(t, sim.Options{HangFor: time.Minute})
	ch := charge(t, c, "c", sim.MethodRefundTimeoutAfterSuccess)
	req := providertest.RefundRequest("r", ch.ID, 1000)
	start := time.Now()
	_, err := c.Refund(providertest.Context(t, 100*time.Millisecond), req)
	wantTimedOut(t, "Refund", err, start)
	recs := s.Refunds()
	if len(recs) != 1 || recs[0].Status != provider.StatusSucceeded {
		t.Fatalf("Refunds() = %+v, want the refund recorded as succeeded", recs)
	}

	// Recovery: the lookup finds it, and a retry returns it without a second refund.
	ctx := providertest.Context(t, 5*time.Second)
	got, err := c.LookupRefund(ctx, provider.RefundLookup{IdempotencyKey: "r", ChargeID: ch.ID})
	if err != nil || got.ID != recs[0].ID || got.Status != provider.StatusSucceeded {
		t.Errorf("LookupRefund = %+v, %v; want refund %s", got, err, recs[0].ID)
	}
	if got, err = c.Refund(ctx, req); err != nil || got.ID != recs[0].ID {
		t.Errorf("retry = %+v, %v; want refund %s", got, err, recs[0].ID)
	}
	if recs := s.Refunds(); len(recs) != 1 || recs[0].RequestCount != 2 {
		t.Errorf("Refunds() = %+v, want one refund requested twice", recs)
	}
}

func TestRefundRejectionsArePlainErrors(t *testing.T) {
	s, c := newSim(t, sim.Options{})
	ctx := providertest.Context(t, 5*time.Second)
	ch := charge(t, c, "c", sim.MethodVisa)
	if _, err := c.Refund(ctx, providertest.RefundRequest("r", ch.ID, 100)); err != nil {
		t.Fatal(err)
	}
	badCurrency := providertest.RefundRequest("r-x", ch.ID, 100)
	badCurrency.Currency = "XXX"
	for _, tc := range []struct {
		name   string
		req    provider.RefundRequest
		status int
		code   string
	}{
		{"unknown charge", providertest.RefundRequest("r-404", "ch_nope", 100), http.StatusNotFound, sim.CodeChargeNotFound},
		{"key reused", providertest.RefundRequest("r", ch.ID, 200), http.StatusUnprocessableEntity, sim.CodeKeyReused},
		{"invalid", badCurrency, http.StatusBadRequest, sim.CodeInvalidRequest},
		{"no key", providertest.RefundRequest("", ch.ID, 100), 0, ""},
		{"no charge", providertest.RefundRequest("r-0", "", 100), 0, ""},
	} {
		_, err := c.Refund(ctx, tc.req)
		providertest.WantOnly(t, tc.name, err, nil)
		var apiErr *simclient.APIError
		if got := errors.As(err, &apiErr); got != (tc.status != 0) || got && (apiErr.StatusCode != tc.status || apiErr.Code != tc.code) {
			t.Errorf("%s: err = %#v, want an *APIError %d %s (none if 0)", tc.name, err, tc.status, tc.code)
		}
	}
	_, err := c.LookupRefund(ctx, provider.RefundLookup{ChargeID: ch.ID})
	providertest.WantOnly(t, "LookupRefund without key", err, nil)
	if recs := s.Refunds(); len(recs) != 1 || recs[0].RequestCount != 1 {
		t.Errorf("Refunds() = %+v, want the first refund only", recs)
	}
}

func TestLookupRefundNotFound(t *testing.T) {
	_, c := newSim(t, sim.Options{})
	ctx := providertest.Context(t, 5*time.Second)
	ch := charge(t, c, "k", sim.MethodVisa)
	if _, err := c.Refund(ctx, providertest.RefundRequest("r", ch.ID, 100)); err != nil {
		t.Fatal(err)
	}
	for name, l := range map[string]provider.RefundLookup{
		"never seen":        {IdempotencyKey: "never", ChargeID: ch.ID},
		"a charge's key":    {IdempotencyKey: "k"},
		"of another charge": {IdempotencyKey: "r", ChargeID: "ch_other"},
	} {
		_, err := c.LookupRefund(ctx, l)
		providertest.WantOnly(t, name, err, provider.ErrNotFound)
	}
}
