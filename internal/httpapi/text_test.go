package httpapi_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/paymentsapi/paymentsapi/internal/authorizations"
	"github.com/paymentsapi/paymentsapi/internal/endpoints"
	"github.com/paymentsapi/paymentsapi/internal/httpapi"
	"github.com/paymentsapi/paymentsapi/internal/httpapi/httpapitest"
	"github.com/paymentsapi/paymentsapi/internal/operation"
	"github.com/paymentsapi/paymentsapi/internal/payments"
	"github.com/paymentsapi/paymentsapi/internal/problem"
	"github.com/paymentsapi/paymentsapi/internal/refunds"
	"github.com/paymentsapi/paymentsapi/internal/servicetest"
)

// answer sends body into dst as a command, and checks it as its handler
// does when dst has a check (operation.Checked), and returns the problem
// it was refused with; ok is false when it was accepted.
func answer(t *testing.T, body string, dst any) (p problem.Problem, ok bool) {
	t.Helper()
	w, r, accepted := httpapitest.Send([]byte(body), dst)
	if accepted {
		c, checked := dst.(operation.Checked)
		if !checked {
			return p, false
		}
		err := c.Check()
		if err == nil {
			return p, false
		}
		httpapi.NewAPI(httpapi.Deps{}).Error(w, r, err)
	}
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || w.Header().Get("Content-Type") != problem.ContentType {
		t.Fatalf("%s: refused with %d %s %s", body, w.Code, w.Header().Get("Content-Type"), w.Body)
	}
	return p, true
}

func fieldsOf(p problem.Problem) []string {
	var names []string
	for _, f := range p.Errors {
		names = append(names, f.Field)
	}
	return names
}

// The card numbers and card-bearing texts every text field is tried with.
var cardTexts = []string{
	"4000056655665556",
	"4000 0566 5566 5556",
	"4000-0566-5566-5556",
	"card 4000056655665556 exp 03/30 cvc 737",
	"x4000056655665556y",
	`\u0034000056655665556`, // the same digits, one of them escaped in the JSON
}

// Every string of every operation's command that holds a card number is
// refused with 400 CARD_DATA_REFUSED naming it, and the answer never
// repeats the number (an "invalid value" would have a client try another).
func TestCardDataIsRefusedInEveryStringOfEveryCommand(t *testing.T) {
	t.Parallel()
	payment := func(field, v string) string { return servicetest.Body(field, v) }
	for _, tc := range []struct {
		command string
		fields  []string
		body    func(field, v string) string
		dst     func() any
	}{
		{"create payment", []string{"accountId", "merchantReference", "paymentMethod", "description", "channel", "currency", "amount"},
			payment, func() any { return &payments.CreateRequest{} }},
		{"create refund", []string{"amount", "reason"},
			func(field, v string) string {
				if field == "amount" {
					return `{"amount":` + v + `}`
				}
				return `{"amount":"1.00","` + field + `":` + v + `}`
			}, func() any { return &refunds.CreateRequest{} }},
		{"capture", []string{"amount"},
			func(field, v string) string { return `{"` + field + `":` + v + `}` }, func() any { return &authorizations.CaptureRequest{} }},
		{"cancel", []string{"reason"},
			func(field, v string) string { return `{"` + field + `":` + v + `}` }, func() any { return &authorizations.CancelRequest{} }},
		{"create webhook endpoint", []string{"url", "description"},
			func(field, v string) string {
				fields := map[string]string{"url": `"https://example.com/hook"`, "description": `"orders"`}
				fields[field] = v
				return `{"url":` + fields["url"] + `,"description":` + fields["description"] + `}`
			}, func() any { return &endpoints.CreateRequest{} }},
	} {
		for _, field := range tc.fields {
			for _, text := range cardTexts {
				b := tc.body(field, `"`+text+`"`)
				p, refused := answer(t, b, tc.dst())
				if !refused || p.Status != http.StatusBadRequest || p.Code != problem.CardDataRefused || !slices.Equal(fieldsOf(p), []string{field}) {
					t.Errorf("%s, %s = %q: refused %v with %d %s naming %q; want 400 CARD_DATA_REFUSED naming %s",
						tc.command, field, text, refused, p.Status, p.Code, fieldsOf(p), field)
				}
				if raw, _ := json.Marshal(p); strings.Contains(string(raw), "5566") {
					t.Errorf("%s, %s: the answer repeats the card number: %s", tc.command, field, raw)
				}
			}
		}
	}
	// In an array, in a member the command does not know, in a member's
	// name, and as a number: refused all the same, before anything else is
	// said of the body.
	for _, tc := range []struct{ body, field string }{
		{`{"url":"https://example.com/hook","eventTypes":["payment.succeeded","4000056655665556"]}`, "eventTypes[1]"},
		{servicetest.Body("extra", `{"note":"4000 0566 5566 5556"}`), "extra.note"},
		{servicetest.Body("extra", `{"4000056655665556":"x"}`), "extra.*"},
		{`{"4000056655665556":"x"}`, "*"},
		{servicetest.Body("amount", `4000056655665556`), "amount"},
	} {
		p, refused := answer(t, tc.body, &endpoints.CreateRequest{})
		if !refused || p.Code != problem.CardDataRefused || !slices.Equal(fieldsOf(p), []string{tc.field}) {
			t.Errorf("%s: refused %v with %s naming %q; want CARD_DATA_REFUSED naming %s", tc.body, refused, p.Code, fieldsOf(p), tc.field)
		}
	}
}

// A payment method is a token; anything else may be a card's number
// written some other way, and is refused as card data.
func TestAPaymentMethodMustBeAToken(t *testing.T) {
	t.Parallel()
	for _, method := range []string{"4000 0566 5566 5556 03/30", "visa 4000 0566 5566 555", "card", "pm_card visa",
		"pm_" + strings.Repeat("a", 126), "PM_CARD_VISA"} {
		b := servicetest.Body("paymentMethod", `"`+method+`"`)
		p, refused := answer(t, b, &payments.CreateRequest{})
		if !refused || p.Code != problem.CardDataRefused || !slices.Equal(fieldsOf(p), []string{"paymentMethod"}) {
			t.Errorf("paymentMethod %q: refused %v with %s naming %q; want CARD_DATA_REFUSED naming paymentMethod", method, refused, p.Code, fieldsOf(p))
		}
		// Beside an unknown member, card data still comes first.
		b = servicetest.Body("paymentMethod", `"`+method+`"`, "extra", "1")
		if p, _ := answer(t, b, &payments.CreateRequest{}); p.Code != problem.CardDataRefused {
			t.Errorf("paymentMethod %q beside an unknown member: %s, want CARD_DATA_REFUSED", method, p.Code)
		}
	}
	for _, method := range []string{"pm_card_visa", "tok_visa", "card_1MvoiELkdIwHu7ixOeFh0ZzP", "src_1", "pm_" + strings.Repeat("a", 125)} {
		if p, refused := answer(t, servicetest.Body("paymentMethod", `"`+method+`"`), &payments.CreateRequest{}); refused {
			t.Errorf("paymentMethod %q: refused with %s %v", method, p.Code, p.Errors)
		}
	}
}

// Unicode controls and format characters (a right-to-left override that
// makes a reference read otherwise than it compares, a zero-width space
// that makes two references look alike and differ, a line break) are
// refused in every text field with 400 VALIDATION_FAILED naming it, raw or
// escaped, with the command's other faults in the same answer.
func TestControlAndFormatCharactersAreRefused(t *testing.T) {
	t.Parallel()
	for _, c := range []string{"\u202e", `\u202e`, "\u200b", `\u200b`, `\u2066`, "\ufeff", `\u00ad`, `\n`, `\t`, "\u0085", `\u007f`} {
		for _, field := range []string{"accountId", "merchantReference", "description"} {
			b := servicetest.Body(field, `"inv`+c+`-7781"`)
			p, refused := answer(t, b, &payments.CreateRequest{})
			if !refused || p.Code != problem.ValidationFailed || !slices.Equal(fieldsOf(p), []string{field}) {
				t.Errorf("%s with %q: refused %v with %s naming %q; want VALIDATION_FAILED naming %s", field, c, refused, p.Code, fieldsOf(p), field)
			}
		}
		p, _ := answer(t, `{"url":"https://example.com/hook","description":"a`+c+`b"}`, &endpoints.CreateRequest{})
		if p.Code != problem.ValidationFailed || !slices.Equal(fieldsOf(p), []string{"description"}) {
			t.Errorf("an endpoint's description with %q: %s naming %q", c, p.Code, fieldsOf(p))
		}
	}
	p, _ := answer(t, servicetest.Body("merchantReference", `"inv\u202e1877"`, "amount", `"ten"`), &payments.CreateRequest{})
	if got := fieldsOf(p); p.Code != problem.ValidationFailed || !slices.Equal(got, []string{"merchantReference", "amount"}) {
		t.Errorf("a bidi override beside a bad amount: %s naming %q, want both", p.Code, got)
	}
	p, _ = answer(t, servicetest.Body("merchantReference", `"inv\u200b"`, "extra", "1"), &payments.CreateRequest{})
	if got := fieldsOf(p); p.Code != problem.ValidationFailed || !slices.Equal(got, []string{"extra", "merchantReference"}) {
		t.Errorf("a zero-width space beside an unknown member: %s naming %q, want both", p.Code, got)
	}
	// Letters of every script, accents, emoji and escapes of plain
	// characters stay accepted.
	for _, text := range []string{"Café Ünïcødé", "注文 7781", "قسيمة", "🙂", `caf\u00e9`, `a\/b`, "inv-2026-000123-7"} {
		if p, refused := answer(t, servicetest.Body("description", `"`+text+`"`), &payments.CreateRequest{}); refused {
			t.Errorf("description %q: refused with %s %v", text, p.Code, p.Errors)
		}
	}
}
