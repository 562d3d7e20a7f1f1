package refunds_test

import (
	"encoding/json"
	"testing"

	"github.com/paymentsapi/paymentsapi/internal/httpapi/httpapitest"
	"github.com/paymentsapi/paymentsapi/internal/money"
	"github.com/paymentsapi/paymentsapi/internal/refunds"
	"github.com/paymentsapi/paymentsapi/internal/validate"
)

// fuzzCurrencies are the payment currencies a refund is fuzzed in: one of
// each number of fraction digits.
var fuzzCurrencies = []string{"EUR", "JPY", "KWD"}

// FuzzDecodeCreateRefund is the payments' FuzzDecodeCreatePayment for POST
// /payments/{id}/refunds, for a payment in one of fuzzCurrencies.
// Seeds: testdata/fuzz/FuzzDecodeCreateRefund.
func FuzzDecodeCreateRefund(f *testing.F) {
	f.Fuzz(func(t *testing.T, body []byte, currency uint8) {
		cur := fuzzCurrencies[int(currency)%len(fuzzCurrencies)]
		check := func(r refunds.CreateRequest) (refunds.Command, error) { return r.Validate("pay_fuzz", cur) }
		cmd, ok := httpapitest.DecodeCommand(t, body, check)
		if !ok {
			return
		}
		if cmd.AmountMinor <= 0 || cmd.Currency != cur || cmd.PaymentID != "pay_fuzz" || !validate.StorableText(cmd.Reason) {
			t.Fatalf("%q: accepted %+v", body, cmd)
		}
		fields := map[string]string{"amount": money.Format(cmd.AmountMinor, cur)}
		if cmd.Reason != "" {
			fields["reason"] = cmd.Reason
		}
		again, err := json.Marshal(fields)
		if err != nil {
			t.Fatal(err)
		}
		if back, ok := httpapitest.DecodeCommand(t, again, check); !ok || back != cmd {
			t.Fatalf("%q: the normalised command %+v, written back as %s, validates to %+v (accepted %v)", body, cmd, again, back, ok)
		}
	})
}
