package sim_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"

	"github.com/paymentsapi/paymentsapi/internal/provider/sim"
	"github.com/paymentsapi/paymentsapi/internal/provider/units"
)

// GET /_sim/methods lists the behaviour table, in its order, and names the
// currency rules the simulator plays.
func TestMethodsListsTheBehaviourTableAndTheCurrencyRules(t *testing.T) {
	for _, rules := range []units.Rules{{}, units.Stripe()} {
		_, base := newServer(t, sim.Options{CurrencyRules: rules})
		resp, err := http.Get(base + "/_sim/methods")
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			PaymentMethods []sim.MethodRow `json:"paymentMethods"`
			CurrencyRules  string          `json:"currencyRules"`
		}
		err = json.NewDecoder(resp.Body).Decode(&body)
		_ = resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /_sim/methods: HTTP %d, %v", resp.StatusCode, err)
		}
		var got, want []string
		for _, m := range body.PaymentMethods {
			got = append(got, m.PaymentMethod)
			if m.Charge == "" || m.Capture == "" || m.Refund == "" {
				t.Errorf("%s is listed without saying what it does: %+v", m.PaymentMethod, m)
			}
		}
		for _, b := range sim.Behaviours {
			want = append(want, b.Method)
		}
		if !slices.Equal(got, want) {
			t.Errorf("methods %v, want the behaviour table's %v", got, want)
		}
		if body.CurrencyRules != rules.Name() {
			t.Errorf("currencyRules %q, want %q", body.CurrencyRules, rules.Name())
		}
	}
}

// Playing Stripe's rules, the simulator counts ISK in Stripe's unit (two
// decimals, whole kronur only) and refuses a BHD amount not ending in 0,
// for charges, refunds and captures, recording nothing it refuses.
func TestStripeRulesCountInStripesUnitAndRefuseWhatStripeRefuses(t *testing.T) {
	s, base := newServer(t, sim.Options{CurrencyRules: units.Stripe()})
	isk := params(sim.MethodVisa)
	isk.AmountMinor, isk.Currency = 10000, "ISK"
	r := create(t, base, "isk-1", isk)
	if r.status != http.StatusOK || r.charge.Amount != "100.00" || r.charge.AmountMinor != 10000 {
		t.Fatalf("ISK 100.00 (amountMinor 10000): HTTP %d %s", r.status, r.raw)
	}
	isk.AmountMinor = 10050
	if r := create(t, base, "isk-2", isk); r.status != http.StatusBadRequest || r.code != sim.CodeInvalidRequest {
		t.Errorf("ISK 100.50: HTTP %d %s, want 400 invalid_request", r.status, r.raw)
	}
	bhd := params(sim.MethodVisa)
	bhd.AmountMinor, bhd.Currency = 1234, "BHD"
	if r := create(t, base, "bhd-1", bhd); r.status != http.StatusBadRequest || r.code != sim.CodeInvalidRequest {
		t.Errorf("BHD 1.234: HTTP %d %s, want 400 invalid_request", r.status, r.raw)
	}
	refund, err := do(t.Context(), nil, postReq(t, base+"/v1/refunds", "re-isk", map[string]any{
		"chargeId": r.charge.ID, "amountMinor": 5050, "currency": "ISK"}))
	if err != nil || refund.status != http.StatusBadRequest {
		t.Errorf("a refund of ISK 50.50: HTTP %d %s, %v; want 400", refund.status, refund.raw, err)
	}
	if n := len(s.Charges()); n != 1 {
		t.Errorf("%d charges recorded, want only ISK 100's", n)
	}
	if n := len(s.Refunds()); n != 0 {
		t.Errorf("%d refunds recorded, want none", n)
	}
}
