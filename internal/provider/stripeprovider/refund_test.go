package stripeprovider_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/provider"
	"github.com/paymentsapi/paymentsapi/internal/provider/providertest"
	"github.com/paymentsapi/paymentsapi/internal/provider/stripeprovider"
)

const refundKey = "paymentsapi:re_1"

// refundReq is the refund request of these tests: 3.00 EUR of pi_1.
func refundReq() provider.RefundRequest {
	return providertest.RefundRequest(refundKey, "pi_1", 300)
}

var refundLookup = provider.RefundLookup{IdempotencyKey: refundKey, ChargeID: "pi_1"}

// stripeRefund is a Refund of pi_1 as Stripe renders it.
func stripeRefund(id, status, key string) map[string]any {
	return map[string]any{
		"id":             id,
		"object":         "refund",
		"amount":         300,
		"currency":       "eur",
		"status":         status,
		"payment_intent": "pi_1",
		"charge":         "ch_1",
		"metadata":       map[string]string{"idempotency_key": key, "refund_id": "re_1"},
	}
}

func refundList(hasMore bool, refunds ...map[string]any) map[string]any {
	data := make([]map[string]any, 0, len(refunds))
	data = append(data, refunds...)
	return map[string]any{"object": "list", "data": data, "has_more": hasMore, "url": "/v1/refunds"}
}

func TestRefundSucceededAndWireFormat(t *testing.T) {
	f := newFake(t)
	f.CreateRefund = answer(http.StatusOK, stripeRefund("re_ok", "succeeded", refundKey))
	got, err := f.provider(t).Refund(providertest.Context(t, 5*time.Second), refundReq())
	if err != nil {
		t.Fatalf("Refund: %v", err)
	}
	want := provider.Refund{ID: "re_ok", IdempotencyKey: refundKey, ChargeID: "pi_1", Status: provider.StatusSucceeded, AmountMinor: 300, Currency: "EUR"}
	if got != want {
		t.Errorf("Refund = %+v, want %+v", got, want)
	}
	reqs := f.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests, want 1", len(reqs))
	}
	checkRefundWireFormat(t, reqs[0], refundReq(), "Bearer sk_test_fake")
}

// checkRefundWireFormat asserts what Refund put on the wire for req.
func checkRefundWireFormat(t *testing.T, r request, req provider.RefundRequest, auth string) {
	t.Helper()
	if r.Method != http.MethodPost || r.Path != "/v1/refunds" {
		t.Errorf("request = %s %s, want POST /v1/refunds", r.Method, r.Path)
	}
	if h := r.Header.Get("Idempotency-Key"); h != req.IdempotencyKey {
		t.Errorf("Idempotency-Key = %q, want %q", h, req.IdempotencyKey)
	}
	if h := r.Header.Get("Authorization"); h != auth {
		t.Errorf("Authorization = %q, want %q", h, auth)
	}
	want := url.Values{
		"payment_intent":            {req.ChargeID},
		"amount":                    {fmt.Sprint(req.AmountMinor)},
		"reason":                    {req.Reason},
		"metadata[idempotency_key]": {req.IdempotencyKey},
		"metadata[refund_id]":       {req.RefundID},
	}
	if fmt.Sprint(r.Form) != fmt.Sprint(want) {
		t.Errorf("form = %v\nwant   %v", r.Form, want)
	}
}

func TestRefundStatuses(t *testing.T) {
	withReason := stripeRefund("re_1", "failed", refundKey)
	withReason["failure_reason"] = "lost_or_stolen_card"
	otherIntent := stripeRefund("re_1", "succeeded", refundKey)
	otherIntent["payment_intent"] = "pi_2"
	for name, tc := range map[string]struct {
		answer      map[string]any
		status      provider.Status
		declineCode string
		err         error
	}{
		"succeeded":                {answer: stripeRefund("re_1", "succeeded", refundKey), status: provider.StatusSucceeded},
		"pending":                  {answer: stripeRefund("re_1", "pending", refundKey), status: provider.StatusPending},
		"requires_action":          {answer: stripeRefund("re_1", "requires_action", refundKey), status: provider.StatusPending},
		"failed with a reason":     {answer: withReason, status: provider.StatusDeclined, declineCode: "lost_or_stolen_card"},
		"failed without a reason":  {answer: stripeRefund("re_1", "failed", refundKey), status: provider.StatusDeclined, declineCode: "failed"},
		"canceled":                 {answer: stripeRefund("re_1", "canceled", refundKey), status: provider.StatusDeclined, declineCode: "canceled"},
		"a status from the future": {answer: stripeRefund("re_1", "reversed", refundKey), err: provider.ErrUnknownOutcome},
		"of another PaymentIntent": {answer: otherIntent, err: provider.ErrUnknownOutcome},
		"not a refund":             {answer: intent("pi_1", "succeeded", refundKey), err: provider.ErrUnknownOutcome},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFake(t)
			f.CreateRefund = answer(http.StatusOK, tc.answer)
			f.ListRefunds = answer(http.StatusOK, refundList(false, tc.answer))
			p := f.provider(t)
			ctx := providertest.Context(t, 5*time.Second)
			created, err := p.Refund(ctx, refundReq())
			found, lerr := p.LookupRefund(ctx, refundLookup)
			if tc.err != nil {
				providertest.WantOnly(t, "Refund", err, tc.err)
				providertest.WantOnly(t, "LookupRefund", lerr, tc.err)
				return
			}
			want := provider.Refund{ID: "re_1", IdempotencyKey: refundKey, ChargeID: "pi_1", Status: tc.status, DeclineCode: tc.declineCode, AmountMinor: 300, Currency: "EUR"}
			if err != nil || created != want {
				t.Errorf("Refund = %+v, %v; want %+v", created, err, want)
			}
			if lerr != nil || found != want {
				t.Errorf("LookupRefund = %+v, %v; want %+v", found, lerr, want)
			}
		})
	}
}

func TestRefundRefusalsAreDeclines(t *testing.T) {
	for _, tc := range []struct {
		status      int
		typ, code   string
		declineCode string // "": not a decline, an *APIError
	}{
		{400, "invalid_request_error", "amount_too_large", "amount_too_large"},
		{400, "invalid_request_error", "charge_already_refunded", "charge_already_refunded"},
		{400, "invalid_request_error", "charge_disputed", "charge_disputed"},
		{400, "invalid_request_error", "charge_not_refundable", "charge_not_refundable"},
		{400, "invalid_request_error", "refund_disputed_payment", "refund_disputed_payment"},
		{402, "card_error", "", "refund_declined"},
		{400, "invalid_request_error", "parameter_missing", ""},
		{400, "idempotency_error", "", ""},
		{404, "invalid_request_error", "resource_missing", ""}, // no such PaymentIntent
	} {
		t.Run(fmt.Sprint(tc.status, tc.typ, tc.code), func(t *testing.T) {
			f := newFake(t)
			f.CreateRefund = answer(tc.status, stripeError(tc.typ, tc.code, "", "refused"))
			got, err := f.provider(t).Refund(providertest.Context(t, 5*time.Second), refundReq())
			if tc.declineCode == "" {
				providertest.WantOnly(t, "Refund", err, nil)
				var apiErr *stripeprovider.APIError
				if !errors.As(err, &apiErr) || apiErr.StatusCode != tc.status {
					t.Errorf("err = %v, want an *APIError %d", err, tc.status)
				}
				return
			}
			want := provider.Refund{IdempotencyKey: refundKey, ChargeID: "pi_1", Status: provider.StatusDeclined, DeclineCode: tc.declineCode, AmountMinor: 300, Currency: "EUR"}
			if err != nil || got != want {
				t.Errorf("Refund = %+v, %v; want %+v", got, err, want)
			}
		})
	}
}

func TestInvalidRefundRequestsAreNotSent(t *testing.T) {
	f := newFake(t)
	p := f.provider(t)
	ctx := providertest.Context(t, 5*time.Second)
	for name, mutate := range map[string]func(*provider.RefundRequest){
		"no key":         func(r *provider.RefundRequest) { r.IdempotencyKey = "" },
		"key too long":   func(r *provider.RefundRequest) { r.IdempotencyKey = strings.Repeat("k", 256) },
		"no charge":      func(r *provider.RefundRequest) { r.ChargeID = "" },
		"zero amount":    func(r *provider.RefundRequest) { r.AmountMinor = 0 },
		"bad currency":   func(r *provider.RefundRequest) { r.Currency = "EURO" },
		"unknown reason": func(r *provider.RefundRequest) { r.Reason = "changed_mind" },
	} {
		req := refundReq()
		mutate(&req)
		_, err := p.Refund(ctx, req)
		providertest.WantOnly(t, "Refund with "+name, err, nil)
	}
	for name, l := range map[string]provider.RefundLookup{
		"no key":    {ChargeID: "pi_1"},
		"no charge": {IdempotencyKey: refundKey},
	} {
		_, err := p.LookupRefund(ctx, l)
		providertest.WantOnly(t, "LookupRefund with "+name, err, nil)
	}
	if n := len(f.requests()); n != 0 {
		t.Errorf("%d requests, want none", n)
	}
}

func TestLookupRefundFindsItAmongOthers(t *testing.T) {
	f := newFake(t)
	f.ListRefunds = answer(http.StatusOK, refundList(false,
		stripeRefund("re_a", "succeeded", "paymentsapi:re_0"),
		stripeRefund("re_b", "succeeded", refundKey),
		stripeRefund("re_c", "failed", "paymentsapi:RE_1"),
	))
	got, err := f.provider(t).LookupRefund(providertest.Context(t, 5*time.Second), refundLookup)
	if err != nil || got.ID != "re_b" || got.Status != provider.StatusSucceeded {
		t.Errorf("LookupRefund = %+v, %v; want re_b succeeded", got, err)
	}
	reqs := f.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests, want 1", len(reqs))
	}
	checkRefundListWireFormat(t, reqs[0], "pi_1")
}

// checkRefundListWireFormat asserts what LookupRefund's first page put on
// the wire.
func checkRefundListWireFormat(t *testing.T, r request, chargeID string) {
	t.Helper()
	if r.Method != http.MethodGet || r.Path != "/v1/refunds" {
		t.Errorf("request = %s %s, want GET /v1/refunds", r.Method, r.Path)
	}
	if want := (url.Values{"payment_intent": {chargeID}, "limit": {"100"}}); fmt.Sprint(r.Query) != fmt.Sprint(want) {
		t.Errorf("query = %v, want %v", r.Query, want)
	}
}

func TestLookupRefundReadsEveryPage(t *testing.T) {
	f := newFake(t)
	f.ListRefunds = func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Query().Get("starting_after") {
		case "":
			writeJSON(w, http.StatusOK, refundList(true, stripeRefund("re_a", "succeeded", "other"), stripeRefund("re_b", "succeeded", "other")))
		case "re_b":
			writeJSON(w, http.StatusOK, refundList(false, stripeRefund("re_c", "pending", refundKey)))
		default:
			writeJSON(w, http.StatusBadRequest, stripeError("invalid_request_error", "", "", "unexpected starting_after"))
		}
	}
	got, err := f.provider(t).LookupRefund(providertest.Context(t, 5*time.Second), refundLookup)
	if err != nil || got.ID != "re_c" || got.Status != provider.StatusPending {
		t.Errorf("LookupRefund = %+v, %v; want re_c pending", got, err)
	}
	if n := len(f.requests()); n != 2 {
		t.Errorf("%d requests, want 2 pages", n)
	}
}

func TestLookupRefundNotFound(t *testing.T) {
	f := newFake(t)
	f.ListRefunds = answer(http.StatusOK, refundList(false, stripeRefund("re_a", "succeeded", "other")))
	_, err := f.provider(t).LookupRefund(providertest.Context(t, 5*time.Second), refundLookup)
	providertest.WantOnly(t, "LookupRefund", err, provider.ErrNotFound)
	f.ListRefunds = answer(http.StatusOK, refundList(false))
	_, err = f.provider(t).LookupRefund(providertest.Context(t, 5*time.Second), refundLookup)
	providertest.WantOnly(t, "LookupRefund of a PaymentIntent without refunds", err, provider.ErrNotFound)
}

func TestLookupRefundSeveralWithOneKeyIsAmbiguous(t *testing.T) {
	f := newFake(t)
	f.ListRefunds = answer(http.StatusOK, refundList(false,
		stripeRefund("re_a", "succeeded", refundKey), stripeRefund("re_b", "failed", "other"), stripeRefund("re_c", "succeeded", refundKey)))
	_, err := f.provider(t).LookupRefund(providertest.Context(t, 5*time.Second), refundLookup)
	providertest.WantOnly(t, "LookupRefund", err, provider.ErrAmbiguous)
	if !strings.Contains(err.Error(), "re_a") || !strings.Contains(err.Error(), "re_c") || strings.Contains(err.Error(), "re_b") {
		t.Errorf("err = %v, want it to name re_a and re_c only", err)
	}
	if !strings.Contains(f.logs.String(), "several Stripe refunds carry one idempotency key") {
		t.Errorf("no warning logged; logs:\n%s", f.logs.String())
	}
}

func TestLookupRefundThatCannotSayIsNeverNotFound(t *testing.T) {
	for name, tc := range map[string]struct {
		list http.HandlerFunc
		want error
	}{
		"429":                            {answer(http.StatusTooManyRequests, stripeError("invalid_request_error", "rate_limit", "", "Too many requests")), provider.ErrUnavailable},
		"500":                            {answer(http.StatusInternalServerError, stripeError("api_error", "", "", "boom")), provider.ErrUnknownOutcome},
		"404 no such PaymentIntent":      {answer(http.StatusNotFound, stripeError("invalid_request_error", "resource_missing", "", "No such payment_intent")), nil},
		"404 HTML from a wrong base URL": {answerRaw(http.StatusNotFound, "text/html", "<html>not found</html>"), nil},
		"200 {}":                         {answerRaw(http.StatusOK, "application/json", `{}`), provider.ErrUnknownOutcome},
		"200 a search_result":            {answerRaw(http.StatusOK, "application/json", `{"object":"search_result","data":[]}`), provider.ErrUnknownOutcome},
		"200 not JSON":                   {answerRaw(http.StatusOK, "text/html", "<html>ok</html>"), provider.ErrUnknownOutcome},
		"has_more without data":          {answer(http.StatusOK, refundList(true)), provider.ErrUnknownOutcome},
		"more pages than it reads":       {answer(http.StatusOK, refundList(true, stripeRefund("re_a", "succeeded", "other"))), provider.ErrUnknownOutcome},
		"hangs past the deadline":        {func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }, provider.ErrUnknownOutcome},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFake(t)
			f.ListRefunds = tc.list
			_, err := f.provider(t).LookupRefund(providertest.Context(t, 500*time.Millisecond), refundLookup)
			providertest.WantOnly(t, "LookupRefund", err, tc.want)
		})
	}
}
