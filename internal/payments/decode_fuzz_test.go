package payments_test

import (
	"encoding/json"
	"testing"

	"github.com/paymentsapi/paymentsapi/internal/httpapi/httpapitest"
	"github.com/paymentsapi/paymentsapi/internal/money"
	"github.com/paymentsapi/paymentsapi/internal/payments"
	"github.com/paymentsapi/paymentsapi/internal/validate"
)

// FuzzDecodeCreatePayment sends any body through what POST /payments does
// before the idempotency engine: the command's decoding, CreateRequest.Validate,
// and the error answer for a refusal. A refusal must be a 4xx problem with a
// code, never a 5xx; an accepted command must be one the database can store,
// and its normalised form must be a fixed point: written back as a request
// it validates to the same command. Seeds: testdata/fuzz/FuzzDecodeCreatePayment.
func FuzzDecodeCreatePayment(f *testing.F) {
	f.Fuzz(func(t *testing.T, body []byte) {
		cmd, ok := httpapitest.DecodeCommand(t, body, payments.CreateRequest.Validate)
		if !ok {
			return
		}
		exp, known := money.Exponent(cmd.Currency)
		if !known || cmd.AmountMinor <= 0 {
			t.Fatalf("%q: accepted %+v (currency exponent %d, known %v)", body, cmd, exp, known)
		}
		for _, s := range []string{cmd.AccountID, cmd.MerchantReference, cmd.PaymentMethod, cmd.Channel, cmd.Description} {
			if !validate.StorableText(s) {
				t.Fatalf("%q: accepted %q, which PostgreSQL text cannot hold", body, s)
			}
		}
		again, err := json.Marshal(map[string]string{
			"accountId": cmd.AccountID, "amount": money.Format(cmd.AmountMinor, cmd.Currency), "currency": cmd.Currency,
			"merchantReference": cmd.MerchantReference, "paymentMethod": cmd.PaymentMethod,
			"channel": cmd.Channel, "description": cmd.Description,
		})
		if err != nil {
			t.Fatal(err)
		}
		if back, ok := httpapitest.DecodeCommand(t, again, payments.CreateRequest.Validate); !ok || back != cmd {
			t.Fatalf("%q: the normalised command %+v, written back as %s, validates to %+v (accepted %v)", body, cmd, again, back, ok)
		}
	})
}
