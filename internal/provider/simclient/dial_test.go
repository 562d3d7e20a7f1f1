package simclient_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/provider"
	"github.com/paymentsapi/paymentsapi/internal/provider/providertest"
	"github.com/paymentsapi/paymentsapi/internal/provider/sim"
	"github.com/paymentsapi/paymentsapi/internal/provider/simclient"
	"github.com/paymentsapi/paymentsapi/internal/provider/units"
)

// dialSim serves a new Simulator playing rules and dials a client to it.
func dialSim(t *testing.T, rules units.Rules) (*sim.Simulator, *simclient.Client) {
	t.Helper()
	s, ts := providertest.ServeSim(t, sim.Options{CurrencyRules: rules}, 100*time.Millisecond, 150*time.Millisecond)
	c, err := simclient.Dial(providertest.Context(t, 5*time.Second), ts.URL, ts.Client())
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	return s, c
}

// A dialled client refuses, before anything is stored, a payment method
// that is none of the simulator's test methods, listing them all.
func TestDialledClientRefusesAnUnknownTestPaymentMethod(t *testing.T) {
	_, c := dialSim(t, units.ISO())
	err := c.Check(provider.Proposal{AmountMinor: 1000, Currency: "EUR", PaymentMethod: "pm_card_vsia"})
	var refused *provider.Refusal
	if !errors.As(err, &refused) || refused.Reason != provider.RefusedPaymentMethod {
		t.Fatalf("Check(pm_card_vsia) = %v, want a refused payment method", err)
	}
	for _, b := range sim.Behaviours {
		if !strings.Contains(refused.Detail, b.Method) {
			t.Errorf("the refusal does not list %s: %s", b.Method, refused.Detail)
		}
	}
	for _, b := range sim.Behaviours {
		if err := c.Check(provider.Proposal{AmountMinor: 1000, Currency: "EUR", PaymentMethod: b.Method}); err != nil {
			t.Errorf("Check(%s) = %v", b.Method, err)
		}
	}
	if err := c.Check(provider.Proposal{AmountMinor: 1234, Currency: "BHD"}); err != nil {
		t.Errorf("Check(BHD 1.234) under ISO's rules = %v, want nil", err)
	}
}

// A client made with New, or dialled to a provider that does not serve
// /_sim/methods, checks nothing.
func TestAProviderWithoutMethodsGetsNoCheck(t *testing.T) {
	ts := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(ts.Close)
	dialled, err := simclient.Dial(providertest.Context(t, 5*time.Second), ts.URL, nil)
	if err != nil {
		t.Fatalf("Dial of a provider without /_sim/methods: %v", err)
	}
	for name, c := range map[string]*simclient.Client{"Dial": dialled, "New": simclient.New(ts.URL, nil)} {
		if err := c.Check(provider.Proposal{AmountMinor: 1000, Currency: "EUR", PaymentMethod: "pm_card_vsia"}); err != nil {
			t.Errorf("%s: Check(pm_card_vsia) = %v, want no check", name, err)
		}
	}
}

// Dialled to a simulator playing Stripe's rules, the client converts with
// the same table: ISK 100 travels as 10000 and comes back as 100, in
// charges, refunds, lookups and listings; a BHD amount not ending in 0 is
// refused before it is sent.
func TestDialledClientConvertsWithTheSimulatorsRules(t *testing.T) {
	s, c := dialSim(t, units.Stripe())
	ctx := providertest.Context(t, 5*time.Second)
	req := providertest.ChargeRequest("k-isk", sim.MethodVisa)
	req.AmountMinor, req.Currency = 100, "ISK"
	ch, err := c.Charge(ctx, req)
	if err != nil {
		t.Fatalf("Charge: %v", err)
	}
	if rec := s.Charges()[0]; rec.AmountMinor != 10000 || rec.Amount != "100.00" {
		t.Errorf("the simulator recorded amountMinor %d (%s), want 10000 (100.00): Stripe's unit", rec.AmountMinor, rec.Amount)
	}
	if ch.AmountMinor != 100 || ch.AmountCapturedMinor != 100 {
		t.Errorf("Charge = %+v, want ISK 100 back in the service's unit", ch)
	}
	if got, err := c.Lookup(ctx, providertest.ChargeLookup("k-isk")); err != nil || got.AmountMinor != 100 {
		t.Errorf("Lookup = %+v, %v; want ISK 100", got, err)
	}
	refund := providertest.RefundRequest("k-re", ch.ID, 40)
	refund.Currency = "ISK"
	rf, err := c.Refund(ctx, refund)
	if err != nil || rf.AmountMinor != 40 || s.Refunds()[0].AmountMinor != 4000 {
		t.Errorf("Refund = %+v, %v (the simulator holds %d); want ISK 40 sent as 4000", rf, err, s.Refunds()[0].AmountMinor)
	}
	listed, err := c.ListCharges(ctx, time.Time{})
	if err != nil || len(listed) != 1 || listed[0].AmountMinor != 100 {
		t.Errorf("ListCharges = %+v, %v; want ISK 100", listed, err)
	}

	var refused *provider.Refusal
	if err := c.Check(provider.Proposal{AmountMinor: 1234, Currency: "BHD", PaymentMethod: sim.MethodVisa}); !errors.As(err, &refused) ||
		refused.Reason != provider.RefusedAmount {
		t.Errorf("Check(BHD 1.234) = %v, want a refused amount", err)
	}
	bhd := providertest.ChargeRequest("k-bhd", sim.MethodVisa)
	bhd.AmountMinor, bhd.Currency = 1234, "BHD"
	if _, err := c.Charge(ctx, bhd); !errors.As(err, &refused) {
		t.Errorf("Charge(BHD 1.234) = %v, want a refusal, nothing sent", err)
	}
	if n := len(s.Charges()); n != 1 {
		t.Errorf("the simulator holds %d charges, want 1: BHD 1.234 was never sent", n)
	}
}
