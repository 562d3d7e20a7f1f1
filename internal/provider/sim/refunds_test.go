package sim_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/provider"
	"github.com/paymentsapi/paymentsapi/internal/provider/sim"
)

type refundParams struct {
	ChargeID    string `json:"chargeId,omitempty"`
	AmountMinor int64  `json:"amountMinor"`
	Currency    string `json:"currency"`
	Reason      string `json:"reason,omitempty"`
	RefundID    string `json:"refundId,omitempty"`
}

func rparams(chargeID string, amount int64) refundParams {
	return refundParams{ChargeID: chargeID, AmountMinor: amount, Currency: "EUR", Reason: "requested_by_customer", RefundID: "re_1"}
}

func refundReq(t *testing.T, base, key string, p any) *http.Request {
	t.Helper()
	return postReq(t, base+"/v1/refunds", key, p)
}

func refund(t *testing.T, base, key string, p any) response {
	t.Helper()
	r, err := do(context.Background(), nil, refundReq(t, base, key, p))
	if err != nil {
		t.Fatalf("refund %q: %v", key, err)
	}
	return r
}

func lookupRefund(t *testing.T, base, key, chargeID string) response {
	t.Helper()
	q := url.Values{"idempotencyKey": {key}}
	if chargeID != "" {
		q.Set("chargeId", chargeID)
	}
	return get(t, base+"/v1/refunds?"+q.Encode())
}

// charged creates a 10.00 EUR charge with method under key and returns its id.
func charged(t *testing.T, base, key, method string) string {
	t.Helper()
	r := create(t, base, key, params(method))
	if r.status != http.StatusOK {
		t.Fatalf("charge %q: %d %s", key, r.status, r.raw)
	}
	return r.charge.ID
}

// wantRefund fails unless r is a 200 refund with status and declineCode.
func wantRefund(t *testing.T, what string, r response, status provider.Status, declineCode string) {
	t.Helper()
	if r.status != http.StatusOK || r.refund.Status != status || r.refund.DeclineCode != declineCode {
		t.Fatalf("%s = %d %s, want 200 %s %q", what, r.status, r.raw, status, declineCode)
	}
}

func TestRefundByPaymentMethod(t *testing.T) {
	for _, tt := range []struct {
		method      string
		status      provider.Status
		declineCode string
	}{
		{sim.MethodVisa, provider.StatusSucceeded, ""},
		{sim.MethodMastercard, provider.StatusSucceeded, ""},
		{sim.MethodSlow, provider.StatusSucceeded, ""},
		{sim.MethodLookupFlaky, provider.StatusSucceeded, ""},
		{sim.MethodRefundDeclined, provider.StatusDeclined, sim.DeclineRefund},
		{sim.MethodChargeDeclined, provider.StatusDeclined, sim.DeclineChargeNotRefundable},
		{"pm_card_amex_unknown", provider.StatusDeclined, sim.DeclineChargeNotRefundable},
	} {
		t.Run(tt.method, func(t *testing.T) {
			fc := clock.NewFake(t0)
			s, base := newServer(t, sim.Options{Clock: fc})
			chargeID := charged(t, base, "charge-key", tt.method)
			start := time.Now()
			r := refund(t, base, "refund-key", rparams(chargeID, 300))
			if elapsed := time.Since(start); elapsed > 100*time.Millisecond {
				t.Errorf("refund took %v; only the charges of %s are slow", elapsed, tt.method)
			}
			want := sim.RefundRecord{
				ID:             r.refund.ID,
				IdempotencyKey: "refund-key",
				ChargeID:       chargeID,
				Status:         tt.status,
				DeclineCode:    tt.declineCode,
				AmountMinor:    300,
				Amount:         "3.00",
				Currency:       "EUR",
				Reason:         "requested_by_customer",
				RefundID:       "re_1",
				CreatedAt:      t0,
				RequestCount:   1,
			}
			if r.status != http.StatusOK || r.refund != want {
				t.Errorf("refund = %d %+v\nwant %+v", r.status, r.refund, want)
			}
			if !strings.HasPrefix(r.refund.ID, "re_") || len(r.refund.ID) < 10 {
				t.Errorf("id = %q, want re_ and a random suffix", r.refund.ID)
			}
			if got := s.Refunds(); len(got) != 1 || got[0] != want {
				t.Errorf("Refunds() = %+v, want [%+v]", got, want)
			}
		})
	}
}

func TestRefundRules(t *testing.T) {
	s, base := newServer(t, sim.Options{})
	ch := charged(t, base, "c1", sim.MethodVisa) // 10.00 EUR

	wantRefund(t, "6.00 of 10.00", refund(t, base, "r1", rparams(ch, 600)), provider.StatusSucceeded, "")
	wantRefund(t, "5.00 more", refund(t, base, "r2", rparams(ch, 500)), provider.StatusDeclined, sim.DeclineAmountTooLarge)
	usd := rparams(ch, 100)
	usd.Currency = "USD"
	wantRefund(t, "in USD", refund(t, base, "r3", usd), provider.StatusDeclined, sim.DeclineCurrencyMismatch)
	wantRefund(t, "the 4.00 left", refund(t, base, "r4", rparams(ch, 400)), provider.StatusSucceeded, "")
	wantRefund(t, "0.01 more", refund(t, base, "r5", rparams(ch, 1)), provider.StatusDeclined, sim.DeclineAmountTooLarge)

	// A declined refund is remembered under its key like any refund: the
	// replay is the same decline, not a second evaluation.
	replay := refund(t, base, "r2", rparams(ch, 500))
	wantRefund(t, "replay of the declined 5.00", replay, provider.StatusDeclined, sim.DeclineAmountTooLarge)
	if replay.refund.RequestCount != 2 {
		t.Errorf("replay requestCount = %d, want 2", replay.refund.RequestCount)
	}
	// Currency is checked before the amount.
	usdBig := rparams(charged(t, base, "c2", sim.MethodVisa), 5000)
	usdBig.Currency = "USD"
	wantRefund(t, "50.00 USD", refund(t, base, "r6", usdBig), provider.StatusDeclined, sim.DeclineCurrencyMismatch)
	// A refund larger than the charge of a method that declines refunds
	// names the amount.
	wantRefund(t, "too large, declining method", refund(t, base, "r7", rparams(charged(t, base, "c3", sim.MethodRefundDeclined), 1001)),
		provider.StatusDeclined, sim.DeclineAmountTooLarge)

	var succeeded int64
	for _, rf := range s.Refunds() {
		if rf.ChargeID == ch && rf.Status == provider.StatusSucceeded {
			succeeded += rf.AmountMinor
		}
	}
	if succeeded != 1000 || len(s.Refunds()) != 7 {
		t.Errorf("refunded %d of charge %s in %d refunds; want 1000 in 7 refunds: %+v", succeeded, ch, len(s.Refunds()), s.Refunds())
	}
}

func TestRefundKeyReusedWithOtherParameters(t *testing.T) {
	s, base := newServer(t, sim.Options{})
	ch := charged(t, base, "c1", sim.MethodVisa)
	other := charged(t, base, "c2", sim.MethodVisa)
	first := refund(t, base, "k", rparams(ch, 300))
	for name, change := range map[string]func(*refundParams){
		"chargeId":    func(p *refundParams) { p.ChargeID = other },
		"amountMinor": func(p *refundParams) { p.AmountMinor = 301 },
		"currency":    func(p *refundParams) { p.Currency = "USD" },
		"reason":      func(p *refundParams) { p.Reason = "duplicate" },
		"refundId":    func(p *refundParams) { p.RefundID = "re_2" },
	} {
		p := rparams(ch, 300)
		change(&p)
		if r := refund(t, base, "k", p); r.status != http.StatusUnprocessableEntity || r.code != sim.CodeKeyReused {
			t.Errorf("reuse with another %s = %d %s, want 422 %s", name, r.status, r.raw, sim.CodeKeyReused)
		}
	}
	// A charge key is not a refund key: the same string may serve both.
	if r := refund(t, base, "c1", rparams(ch, 200)); r.status != http.StatusOK || r.refund.ID == first.refund.ID {
		t.Errorf("refund with a charge's key = %d %s, want a new refund", r.status, r.raw)
	}
	got := s.Refunds()
	if len(got) != 2 || got[0].ID != first.refund.ID || got[0].RequestCount != 1 {
		t.Errorf("Refunds() = %+v, want the first refund (1 request) and the one keyed c1", got)
	}
}

func TestRefundValidation(t *testing.T) {
	s, base := newServer(t, sim.Options{})
	ch := charged(t, base, "c", sim.MethodVisa)
	tests := []struct {
		name   string
		key    string
		body   any
		status int
		code   string
	}{
		{"missing key", "", rparams(ch, 1), 400, sim.CodeKeyMissing},
		{"long key", strings.Repeat("k", 256), rparams(ch, 1), 400, sim.CodeKeyInvalid},
		{"malformed json", "k", []byte(`{"chargeId":`), 400, sim.CodeInvalidRequest},
		{"trailing data", "k", []byte(`{"chargeId":"` + ch + `","amountMinor":1,"currency":"EUR"} {}`), 400, sim.CodeInvalidRequest},
		{"unknown field", "k", map[string]any{"chargeId": ch, "amountMinor": 1, "currency": "EUR", "amount": "0.01"}, 400, sim.CodeInvalidRequest},
		{"no charge id", "k", refundParams{AmountMinor: 1, Currency: "EUR"}, 400, sim.CodeInvalidRequest},
		{"zero amount", "k", rparams(ch, 0), 400, sim.CodeInvalidRequest},
		{"negative amount", "k", rparams(ch, -1), 400, sim.CodeInvalidRequest},
		{"unknown currency", "k", refundParams{ChargeID: ch, AmountMinor: 1, Currency: "XXX"}, 400, sim.CodeInvalidRequest},
		{"unknown reason", "k", refundParams{ChargeID: ch, AmountMinor: 1, Currency: "EUR", Reason: "changed_mind"}, 400, sim.CodeInvalidRequest},
		{"unknown charge", "k", rparams("ch_nope", 1), 404, sim.CodeChargeNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if r := refund(t, base, tt.key, tt.body); r.status != tt.status || r.code != tt.code {
				t.Errorf("got %d %s, want %d %s", r.status, r.raw, tt.status, tt.code)
			}
		})
	}
	if got := s.Refunds(); len(got) != 0 {
		t.Errorf("Refunds() = %+v, want none", got)
	}
	if r := lookupRefund(t, base, "k", ""); r.status != http.StatusNotFound {
		t.Errorf("lookup after rejected creates = %d %s, want 404", r.status, r.raw)
	}
}

func TestRefundTimeoutAfterSuccessDropsTheResponse(t *testing.T) {
	const hang = 200 * time.Millisecond
	s, base := newServer(t, sim.Options{HangFor: hang})
	start := time.Now()
	ch := charged(t, base, "c", sim.MethodRefundTimeoutAfterSuccess)
	if elapsed := time.Since(start); elapsed >= hang {
		t.Errorf("the charge took %v; only its refunds lose their answer", elapsed)
	}
	// A fresh connection, so that net/http cannot transparently resend.
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	start = time.Now()
	if _, err := do(context.Background(), hc, refundReq(t, base, "lost", rparams(ch, 300))); err == nil {
		t.Fatal("refund answered; want the connection dropped without a response")
	}
	if elapsed := time.Since(start); elapsed < hang {
		t.Errorf("connection dropped after %v, want after HangFor %v", elapsed, hang)
	}
	got := s.Refunds()
	if len(got) != 1 || got[0].Status != provider.StatusSucceeded || got[0].IdempotencyKey != "lost" {
		t.Fatalf("Refunds() = %+v, want one succeeded refund", got)
	}

	start = time.Now()
	r := refund(t, base, "lost", rparams(ch, 300))
	if elapsed := time.Since(start); elapsed >= hang {
		t.Errorf("retry took %v, want an immediate answer", elapsed)
	}
	if r.status != http.StatusOK || r.refund.ID != got[0].ID || r.refund.RequestCount != 2 {
		t.Errorf("retry = %d %+v, want refund %s with requestCount 2", r.status, r.refund, got[0].ID)
	}
	if l := lookupRefund(t, base, "lost", ch); l.status != http.StatusOK || l.refund.ID != got[0].ID {
		t.Errorf("lookup = %d %s, want refund %s", l.status, l.raw, got[0].ID)
	}
}

func TestRefundKeyTTL(t *testing.T) {
	const ttl = time.Hour
	fc := clock.NewFake(t0)
	s, base := newServer(t, sim.Options{Clock: fc, KeyTTL: ttl})
	a := charged(t, base, "a", sim.MethodVisa)
	b := charged(t, base, "b", sim.MethodVisa)

	first := refund(t, base, "k", rparams(a, 300))
	fc.Advance(ttl - time.Microsecond)
	if r := refund(t, base, "k", rparams(a, 300)); r.refund.ID != first.refund.ID {
		t.Fatalf("just inside the TTL: got refund %s, want the stored %s", r.refund.ID, first.refund.ID)
	}
	fc.Advance(time.Microsecond)
	// Past the TTL the key is forgotten for creates, even with other
	// parameters: here, a refund of another charge.
	second := refund(t, base, "k", rparams(b, 700))
	if second.status != http.StatusOK || second.refund.ID == first.refund.ID || second.refund.RequestCount != 1 {
		t.Fatalf("create past TTL = %d %s, want a new refund", second.status, second.raw)
	}
	// Lookups ignore the TTL: the newest refund with the key, or the
	// newest of the charge asked for.
	for _, tc := range []struct{ chargeID, want string }{{"", second.refund.ID}, {b, second.refund.ID}, {a, first.refund.ID}} {
		if r := lookupRefund(t, base, "k", tc.chargeID); r.status != http.StatusOK || r.refund.ID != tc.want {
			t.Errorf("lookup of k, charge %q = %d %s, want refund %s", tc.chargeID, r.status, r.raw, tc.want)
		}
	}
	if r := lookupRefund(t, base, "k", "ch_other"); r.status != http.StatusNotFound || r.code != sim.CodeNotFound {
		t.Errorf("lookup of k for another charge = %d %s, want 404 not_found", r.status, r.raw)
	}
	if n := len(s.Refunds()); n != 2 {
		t.Errorf("%d refunds, want 2", n)
	}
}

func TestConcurrentRefundsOneKeyOneRefund(t *testing.T) {
	s, base := newServer(t, sim.Options{})
	ch := charged(t, base, "c", sim.MethodVisa)
	const n = 50
	results := parallel(n, func(int) (response, error) {
		return do(context.Background(), nil, refundReq(t, base, "same", rparams(ch, 1000)))
	})
	for i, res := range results {
		if res.err != nil || res.r.status != http.StatusOK || res.r.refund.ID != results[0].r.refund.ID {
			t.Fatalf("request %d = %+v, %v; want refund %s", i, res.r, res.err, results[0].r.refund.ID)
		}
	}
	got := s.Refunds()
	if len(got) != 1 || got[0].RequestCount != n || got[0].Status != provider.StatusSucceeded {
		t.Fatalf("Refunds() = %+v, want one succeeded refund with requestCount %d", got, n)
	}
}

func TestConcurrentRefundsNeverExceedTheCharge(t *testing.T) {
	s, base := newServer(t, sim.Options{})
	ch := charged(t, base, "c", sim.MethodVisa) // 1000
	const n = 25                                // of 100 each: 10 fit
	results := parallel(n, func(i int) (response, error) {
		return do(context.Background(), nil, refundReq(t, base, fmt.Sprintf("k%d", i), rparams(ch, 100)))
	})
	var ok, tooLarge int
	for i, res := range results {
		switch {
		case res.err != nil || res.r.status != http.StatusOK:
			t.Fatalf("request %d = %+v, %v", i, res.r, res.err)
		case res.r.refund.Status == provider.StatusSucceeded:
			ok++
		case res.r.refund.DeclineCode == sim.DeclineAmountTooLarge:
			tooLarge++
		}
	}
	if ok != 10 || tooLarge != n-10 || len(s.Refunds()) != n {
		t.Errorf("%d succeeded, %d amount_too_large of %d (%d recorded); want 10 and %d", ok, tooLarge, n, len(s.Refunds()), n-10)
	}
}

type result struct {
	r   response
	err error
}

// parallel runs f(0) to f(n-1) at once, each on its own goroutine, and
// returns their results in order.
func parallel(n int, f func(i int) (response, error)) []result {
	out := make([]result, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			out[i].r, out[i].err = f(i)
		})
	}
	close(start)
	wg.Wait()
	return out
}

func TestLookupRefund(t *testing.T) {
	_, base := newServer(t, sim.Options{FlakyLookups: 5})
	if r := lookupRefund(t, base, "never", ""); r.status != http.StatusNotFound || r.code != sim.CodeNotFound {
		t.Errorf("unknown key = %d %s, want 404 not_found", r.status, r.raw)
	}
	// A charge's key finds no refund; refund lookups are never flaky.
	ch := charged(t, base, "a/b c&d=e", sim.MethodLookupFlaky)
	if r := lookupRefund(t, base, "a/b c&d=e", ""); r.status != http.StatusNotFound {
		t.Errorf("lookup of a charge's key = %d %s, want 404", r.status, r.raw)
	}
	created := refund(t, base, "a/b c&d=e", rparams(ch, 100))
	for i := 1; i <= 2; i++ {
		r := lookupRefund(t, base, "a/b c&d=e", ch)
		if r.status != http.StatusOK || r.refund.ID != created.refund.ID || r.refund.LookupCount != i || r.refund.RequestCount != 1 {
			t.Errorf("lookup %d = %d %s, want refund %s with lookupCount %d", i, r.status, r.raw, created.refund.ID, i)
		}
	}
	if r := get(t, base+"/v1/refunds"); r.status != http.StatusBadRequest || r.code != sim.CodeInvalidRequest {
		t.Errorf("lookup without key = %d %s, want 400", r.status, r.raw)
	}
}

func TestListRefunds(t *testing.T) {
	_, base := newServer(t, sim.Options{})
	ch := charged(t, base, "c", sim.MethodVisa)
	a := refund(t, base, "a", rparams(ch, 250))
	refund(t, base, "a", rparams(ch, 250))
	b := refund(t, base, "b", rparams(ch, 751))

	resp, err := http.Get(base + "/_sim/refunds")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list struct {
		Refunds []map[string]any `json:"refunds"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /_sim/refunds: %d %v", resp.StatusCode, err)
	}
	want := []map[string]any{
		{"id": a.refund.ID, "idempotencyKey": "a", "chargeId": ch, "amount": "2.50", "amountMinor": 250.0, "currency": "EUR", "status": "succeeded", "requestCount": 2.0},
		{"id": b.refund.ID, "idempotencyKey": "b", "chargeId": ch, "amount": "7.51", "amountMinor": 751.0, "currency": "EUR", "status": "declined", "declineCode": "amount_too_large", "requestCount": 1.0},
	}
	if len(list.Refunds) != len(want) {
		t.Fatalf("listed %d refunds, want %d: %v", len(list.Refunds), len(want), list.Refunds)
	}
	for i, w := range want {
		for k, v := range w {
			if list.Refunds[i][k] != v {
				t.Errorf("refund %d: %s = %v, want %v", i, k, list.Refunds[i][k], v)
			}
		}
	}
}

func TestBehaviours(t *testing.T) {
	methods := []string{
		sim.MethodVisa, sim.MethodMastercard, sim.MethodChargeDeclined, sim.MethodInsufficientFunds,
		sim.MethodSlow, sim.MethodTimeoutAfterSuccess, sim.MethodUnavailable, sim.MethodLookupFlaky,
		sim.MethodRefundDeclined, sim.MethodRefundTimeoutAfterSuccess,
		sim.MethodCaptureDeclined, sim.MethodCaptureTimeoutAfterSuccess,
		sim.MethodThreeDSecureRequired, sim.MethodThreeDSecureFail,
	}
	seen := map[string]int{}
	for _, b := range sim.Behaviours {
		seen[b.Method]++
	}
	md := sim.MethodsMarkdown()
	for _, m := range methods {
		if seen[m] != 1 {
			t.Errorf("%s is in Behaviours %d times, want once", m, seen[m])
		}
		if !strings.Contains(md, "| `"+m+"` |") {
			t.Errorf("MethodsMarkdown has no row for %s:\n%s", m, md)
		}
	}
	if len(seen) != len(methods) {
		t.Errorf("Behaviours has %d methods, the constants %d", len(seen), len(methods))
	}
	for _, row := range []string{
		"| `pm_sim_refund_declined` | succeeds | succeeds | declined (refund_declined) |",
		"| `pm_sim_capture_declined` | succeeds | declined (capture_declined) | succeeds |",
		"| `pm_sim_capture_timeout_after_success` | succeeds | succeeds, but the answer is lost",
		"| `pm_card_chargeDeclined` | declined (generic_decline) | declined (charge_not_capturable) | declined (charge_not_refundable) |",
		"| `pm_sim_unavailable` | refused: 503 unavailable, nothing recorded | none: no charge is ever made | none: no charge is ever made |",
		"| any other | declined (unsupported_payment_method) | declined (charge_not_capturable) |",
	} {
		if !strings.Contains(md, row) {
			t.Errorf("MethodsMarkdown lacks %q:\n%s", row, md)
		}
	}
}
