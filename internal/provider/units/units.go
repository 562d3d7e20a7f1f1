// Package units converts amounts between the service's unit, ISO 4217
// minor units (package money), and a payment provider's own, and refuses
// an amount the provider's currency rules refuse before anything is sent.
//
// A provider's rules are data: one Rule per currency where the provider
// differs from ISO 4217, saying how many decimals its amounts carry and
// which multiples of its unit it takes. A currency without a rule is taken
// as ISO 4217 has it. Every adapter that speaks to a provider, or to the
// simulator playing it, converts with that provider's Rules, in both
// directions: to the provider on every amount sent (ToProvider), back on
// every amount read (FromProvider).
package units

import (
	"fmt"

	"github.com/paymentsapi/paymentsapi/internal/money"
	"github.com/paymentsapi/paymentsapi/internal/provider"
)

// Rule is how a provider takes the amounts of one currency.
type Rule struct {
	Currency string
	// Decimals is how many decimals the provider's amounts carry: with 2,
	// the provider's amount 10000 is 100.00. Never fewer than ISO 4217's.
	Decimals int
	// Multiple is what every amount must be a multiple of, in the
	// provider's unit (1: any amount).
	Multiple int64
	// Says is the rule in words, for a refusal's detail.
	Says string
}

// Stripe is Stripe's table, from the "Special cases" and "Three-decimal
// currencies" sections of its "Supported currencies" page, for the
// currencies the service takes (package money):
//
//   - ISK is a two-decimal currency in Stripe's API, but card networks take
//     whole kronur only: ISK 100 is amount=10000, and an amount that is not
//     a multiple of 100 is refused, for charges and refunds alike (Stripe's
//     support article "Deprecation of fractional ISK charges and refunds").
//     The service counts ISK in whole kronur (ISO 4217), so it only
//     converts.
//   - BHD, JOD, KWD, OMR and TND have three decimals in Stripe's API as in
//     ISO 4217, but Stripe's payment partners need the last digit to be 0,
//     in every standard payment flow (PaymentIntents and their captures,
//     Refunds): 5.124 KWD is refused, 5.120 and 5.130 are taken.
//
// The page's other special cases are payouts only (HUF, TWD: Stripe
// charges them with two decimals, as ISO 4217 counts them) or currencies
// the service does not take (UGX).
func Stripe() Rules {
	return New("stripe",
		Rule{Currency: "ISK", Decimals: 2, Multiple: 100, Says: "ISK amounts must be whole kronur"},
		Rule{Currency: "BHD", Decimals: 3, Multiple: 10, Says: "BHD card amounts must end in 0"},
		Rule{Currency: "JOD", Decimals: 3, Multiple: 10, Says: "JOD card amounts must end in 0"},
		Rule{Currency: "KWD", Decimals: 3, Multiple: 10, Says: "KWD card amounts must end in 0"},
		Rule{Currency: "OMR", Decimals: 3, Multiple: 10, Says: "OMR card amounts must end in 0"},
		Rule{Currency: "TND", Decimals: 3, Multiple: 10, Says: "TND card amounts must end in 0"},
	)
}

// ISO is the rules of a provider that counts every currency as ISO 4217
// does and takes any amount (the simulator's default): no rule at all. The
// zero Rules are the same.
func ISO() Rules { return Rules{} }

// Named returns the rules called name: "iso" (or "") or "stripe".
func Named(name string) (Rules, error) {
	switch name {
	case "", "iso":
		return ISO(), nil
	case "stripe":
		return Stripe(), nil
	}
	return Rules{}, fmt.Errorf("unknown currency rules %q: iso or stripe", name)
}

// Rules is one provider's table of currency rules. The zero value is ISO.
type Rules struct {
	name  string
	rules map[string]Rule
}

// New returns the rules called name, of one Rule per currency.
func New(name string, rules ...Rule) Rules {
	r := Rules{name: name, rules: make(map[string]Rule, len(rules))}
	for _, ru := range rules {
		r.rules[ru.Currency] = ru
	}
	return r
}

// Name is the rules' name: "iso" for the zero value.
func (r Rules) Name() string {
	if r.name == "" {
		return "iso"
	}
	return r.name
}

// ToProvider converts minor, in currency's ISO 4217 minor units, to the
// provider's unit, or refuses it with a *provider.Refusal (RefusedAmount)
// whose detail says what the provider would take: "BHD card amounts must
// end in 0: 1.230 or 1.240, not 1.234".
func (r Rules) ToProvider(minor int64, currency string) (int64, error) {
	ru, scale := r.rule(currency)
	amount := minor * scale
	if amount%ru.Multiple != 0 {
		return 0, refusal(ru, amount, func(a int64) string { return money.Format(a/scale, currency) })
	}
	return amount, nil
}

// FromProvider converts amount, in the provider's unit, to currency's ISO
// 4217 minor units. An amount that is no whole number of them (ISK 100.50)
// is an error wrapping provider.ErrAmbiguous: nobody can tell in the
// service's unit what moved.
func (r Rules) FromProvider(amount int64, currency string) (int64, error) {
	ru, scale := r.rule(currency)
	if amount%scale != 0 {
		return 0, fmt.Errorf("%w: the provider's amount %s %s is no whole number of %s's minor units",
			provider.ErrAmbiguous, money.FormatDecimals(amount, ru.Decimals), currency, currency)
	}
	return amount / scale, nil
}

// ReadCharge sets ch's AmountMinor and AmountCapturedMinor, in the
// service's unit, from a charge's amount and the amount captured of it, in
// the provider's unit of ch.Currency (errors as FromProvider's).
func (r Rules) ReadCharge(ch *provider.Charge, amount, captured int64) error {
	var err error
	if ch.AmountMinor, err = r.FromProvider(amount, ch.Currency); err != nil {
		return err
	}
	ch.AmountCapturedMinor, err = r.FromProvider(captured, ch.Currency)
	return err
}

// Check refuses, with a *provider.Refusal, an amount in the provider's own
// unit that the provider does not take: what the simulator playing the
// provider checks of the amounts it is sent.
func (r Rules) Check(amount int64, currency string) error {
	ru, _ := r.rule(currency)
	if amount%ru.Multiple != 0 {
		return refusal(ru, amount, func(a int64) string { return money.FormatDecimals(a, ru.Decimals) })
	}
	return nil
}

// Format renders amount, in the provider's unit, as a decimal with the
// provider's decimals for currency: Format(10000, "ISK") is "100.00" with
// Stripe's rules, "10000" with ISO's.
func (r Rules) Format(amount int64, currency string) string {
	ru, _ := r.rule(currency)
	return money.FormatDecimals(amount, ru.Decimals)
}

// rule is the rule of currency (ISO 4217's way with it when the table has
// none) and the factor from its ISO 4217 minor unit to the provider's.
func (r Rules) rule(currency string) (Rule, int64) {
	iso, _ := money.Exponent(currency) // 0 for a currency money does not know: taken as it is
	ru, ok := r.rules[currency]
	if !ok {
		ru = Rule{Currency: currency, Decimals: iso, Multiple: 1}
	}
	scale := int64(1)
	for range ru.Decimals - iso {
		scale *= 10
	}
	return ru, scale
}

// refusal is the refusal of amount, in the provider's unit, under rule ru:
// its words, the nearest amounts the provider takes, and amount, each
// rendered by format.
func refusal(ru Rule, amount int64, format func(int64) string) *provider.Refusal {
	below := amount - amount%ru.Multiple
	took := format(below + ru.Multiple)
	if below > 0 {
		took = format(below) + " or " + took
	}
	return &provider.Refusal{Reason: provider.RefusedAmount,
		Detail: fmt.Sprintf("%s: %s, not %s", ru.Says, took, format(amount))}
}
