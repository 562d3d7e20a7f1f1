package httpapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/paymentsapi/paymentsapi/internal/money"
	"github.com/paymentsapi/paymentsapi/internal/payments"
	"github.com/paymentsapi/paymentsapi/internal/problem"
	"github.com/paymentsapi/paymentsapi/internal/refunds"
	"github.com/paymentsapi/paymentsapi/internal/validate"
)

// FuzzDecodeCreatePayment sends any body through what POST /payments does
// before the idempotency engine: decodeJSON, CreateRequest.Validate, and the
// error writer for a refusal. A refusal must be a 4xx problem with a code,
// never a 5xx; an accepted command must be one the database can store, and
// its normalised form must be a fixed point: written back as a request it
// validates to the same command. Seeds: testdata/fuzz/FuzzDecodeCreatePayment.
func FuzzDecodeCreatePayment(f *testing.F) {
	f.Fuzz(func(t *testing.T, body []byte) {
		cmd, ok := decodeCommand(t, body, payments.CreateRequest.Validate)
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
		if back, ok := decodeCommand(t, again, payments.CreateRequest.Validate); !ok || back != cmd {
			t.Fatalf("%q: the normalised command %+v, written back as %s, validates to %+v (accepted %v)", body, cmd, again, back, ok)
		}
	})
}

// fuzzCurrencies are the payment currencies a refund is fuzzed in: one of
// each number of fraction digits.
var fuzzCurrencies = []string{"EUR", "JPY", "KWD"}

// FuzzDecodeCreateRefund is FuzzDecodeCreatePayment for POST
// /payments/{id}/refunds, for a payment in one of fuzzCurrencies.
// Seeds: testdata/fuzz/FuzzDecodeCreateRefund.
func FuzzDecodeCreateRefund(f *testing.F) {
	f.Fuzz(func(t *testing.T, body []byte, currency uint8) {
		cur := fuzzCurrencies[int(currency)%len(fuzzCurrencies)]
		check := func(r refunds.CreateRequest) (refunds.Command, error) { return r.Validate("pay_fuzz", cur) }
		cmd, ok := decodeCommand(t, body, check)
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
		if back, ok := decodeCommand(t, again, check); !ok || back != cmd {
			t.Fatalf("%q: the normalised command %+v, written back as %s, validates to %+v (accepted %v)", body, cmd, again, back, ok)
		}
	})
}

// decodeCommand runs body through decodeJSON and validate as a create
// handler does, and returns the command if both accept it. A refusal is
// written as the handler would write it, and must be a 4xx problem+json
// with a code and the status it is served with.
func decodeCommand[Req, Cmd any](t *testing.T, body []byte, validate func(Req) (Cmd, error)) (Cmd, bool) {
	t.Helper()
	w := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	var (
		req Req
		cmd Cmd
		err error
	)
	if prob := decodeJSON(w, r, &req); prob != nil {
		prob.Write(w)
	} else if cmd, err = validate(req); err != nil {
		errorWriter{}.write(w, r, err)
	} else {
		return cmd, true
	}
	var p problem.Problem
	if jerr := json.Unmarshal(w.Body.Bytes(), &p); jerr != nil || w.Code < 400 || w.Code > 499 ||
		w.Header().Get("Content-Type") != problem.ContentType || p.Code == "" || p.Status != w.Code {
		t.Fatalf("%q refused with %d %s %s (%v): want a 4xx problem with a code", body, w.Code, w.Header().Get("Content-Type"), w.Body, jerr)
	}
	return cmd, false
}
