package units

import (
	"errors"
	"testing"

	"github.com/paymentsapi/paymentsapi/internal/money"
	"github.com/paymentsapi/paymentsapi/internal/provider"
)

// TestEveryRuleIsOneTheConversionCanKeep checks the tables themselves: a
// rule names a currency the service takes, carries at least ISO 4217's
// decimals, and its multiple is a whole number of the ISO minor unit (so
// that a refusal can name ISO amounts the provider takes).
func TestEveryRuleIsOneTheConversionCanKeep(t *testing.T) {
	for _, rules := range []Rules{Stripe(), ISO()} {
		for currency := range rules.rules {
			ru, scale := rules.rule(currency)
			iso, known := money.Exponent(currency)
			switch {
			case ru.Currency != currency:
				t.Errorf("%s: the rule of %s says it is of %s", rules.Name(), currency, ru.Currency)
			case !known:
				t.Errorf("%s: %s is not a currency the service takes (package money)", rules.Name(), currency)
			case ru.Decimals < iso:
				t.Errorf("%s: %s has %d decimals, fewer than ISO 4217's %d", rules.Name(), currency, ru.Decimals, iso)
			case ru.Multiple <= 0 || ru.Multiple%scale != 0:
				t.Errorf("%s: %s's multiple %d is not a whole number of ISO minor units (%d)", rules.Name(), currency, ru.Multiple, scale)
			case ru.Says == "":
				t.Errorf("%s: %s's rule has no words for its refusal", rules.Name(), currency)
			}
		}
	}
}

func TestStripeCountsISKInHundredthsAndWholeKronurOnly(t *testing.T) {
	r := Stripe()
	got, err := r.ToProvider(100, "ISK") // ISK 100, whole kronur in ISO 4217
	if err != nil || got != 10000 {
		t.Fatalf("ToProvider(ISK 100) = %d, %v; want 10000", got, err)
	}
	if back, err := r.FromProvider(10000, "ISK"); err != nil || back != 100 {
		t.Errorf("FromProvider(10000 ISK) = %d, %v; want 100", back, err)
	}
	if _, err := r.FromProvider(10050, "ISK"); !errors.Is(err, provider.ErrAmbiguous) {
		t.Errorf("FromProvider(10050 ISK) = %v, want an error wrapping ErrAmbiguous (100.50 kronur is no ISO amount)", err)
	}
	var refused *provider.Refusal
	if err := r.Check(10050, "ISK"); !errors.As(err, &refused) || refused.Detail != "ISK amounts must be whole kronur: 100.00 or 101.00, not 100.50" {
		t.Errorf("Check(10050 ISK) = %v", err)
	}
	if err := r.Check(10000, "ISK"); err != nil {
		t.Errorf("Check(10000 ISK) = %v", err)
	}
	if f := r.Format(10000, "ISK"); f != "100.00" {
		t.Errorf("Format(10000 ISK) = %q, want 100.00", f)
	}
}

func TestStripeRefusesThreeDecimalAmountsNotEndingInZero(t *testing.T) {
	r := Stripe()
	for _, currency := range []string{"BHD", "JOD", "KWD", "OMR", "TND"} {
		if got, err := r.ToProvider(1230, currency); err != nil || got != 1230 {
			t.Errorf("ToProvider(1230 %s) = %d, %v; want 1230", currency, got, err)
		}
		_, err := r.ToProvider(1234, currency)
		var refused *provider.Refusal
		if !errors.As(err, &refused) || refused.Reason != provider.RefusedAmount {
			t.Fatalf("ToProvider(1234 %s) = %v, want a refused amount", currency, err)
		}
		if want := currency + " card amounts must end in 0: 1.230 or 1.240, not 1.234"; refused.Detail != want {
			t.Errorf("detail %q, want %q", refused.Detail, want)
		}
	}
	var refused *provider.Refusal
	if _, err := r.ToProvider(4, "KWD"); !errors.As(err, &refused) || refused.Detail != "KWD card amounts must end in 0: 0.010, not 0.004" {
		t.Errorf("ToProvider(0.004 KWD) = %v: below the smallest amount, only the next one up is offered", err)
	}
}

func TestOtherCurrenciesAndISORulesAreISO4217(t *testing.T) {
	for _, r := range []Rules{Stripe(), ISO(), {}} {
		for _, c := range []struct {
			minor    int64
			currency string
		}{{1001, "EUR"}, {7, "JPY"}, {100, "ISK"}, {1234, "BHD"}} {
			if r.Name() == "stripe" && (c.currency == "ISK" || c.currency == "BHD") {
				continue
			}
			got, err := r.ToProvider(c.minor, c.currency)
			back, berr := r.FromProvider(got, c.currency)
			if err != nil || berr != nil || got != c.minor || back != c.minor {
				t.Errorf("%s: %d %s -> %d (%v) -> %d (%v), want it unchanged", r.Name(), c.minor, c.currency, got, err, back, berr)
			}
		}
	}
	if _, err := Named("paypal"); err == nil {
		t.Error(`Named("paypal") succeeded`)
	}
	for _, name := range []string{"", "iso", "stripe"} {
		if r, err := Named(name); err != nil || (name != "" && r.Name() != name) {
			t.Errorf("Named(%q) = %s, %v", name, r.Name(), err)
		}
	}
}
