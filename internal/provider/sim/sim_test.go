package sim_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/provider"
	"github.com/paymentsapi/paymentsapi/internal/provider/providertest"
	"github.com/paymentsapi/paymentsapi/internal/provider/sim"
)

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// newServer serves a new Simulator with fast test delays on an httptest
// server, closed at the end of the test.
func newServer(t *testing.T, opts sim.Options) (*sim.Simulator, string) {
	t.Helper()
	s, ts := providertest.ServeSim(t, opts, 150*time.Millisecond, 200*time.Millisecond)
	return s, ts.URL
}

type chargeParams struct {
	AmountMinor   int64  `json:"amountMinor"`
	Currency      string `json:"currency"`
	PaymentMethod string `json:"paymentMethod"`
	Description   string `json:"description,omitempty"`
	PaymentID     string `json:"paymentId,omitempty"`
	CaptureMethod string `json:"captureMethod,omitempty"`
}

func params(method string) chargeParams {
	return chargeParams{AmountMinor: 1000, Currency: "EUR", PaymentMethod: method, Description: "order 7", PaymentID: "pay_1"}
}

type response struct {
	status  int
	charge  sim.ChargeRecord  // a 200 from /v1/charges
	refund  sim.RefundRecord  // a 200 from /v1/refunds
	capture sim.CaptureRecord // a 200 from /v1/captures
	void    sim.VoidRecord    // a 200 from /v1/voids
	code    string            // "error" of an error body
	raw     string
}

// errBadAnswer marks an answer that breaks the API's shape, as opposed to a
// transport error.
var errBadAnswer = errors.New("bad answer")

// do sends req with ctx and decodes the answer. It is safe to call from any
// goroutine.
func do(ctx context.Context, hc *http.Client, req *http.Request) (response, error) {
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req.WithContext(ctx))
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return response{}, err
	}
	r := response{status: resp.StatusCode, raw: string(b)}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		return r, fmt.Errorf("%w: Content-Type = %q, want application/json (body %s)", errBadAnswer, ct, b)
	}
	if resp.StatusCode == http.StatusOK {
		target := any(&r.charge)
		switch {
		case strings.HasPrefix(req.URL.Path, "/v1/refunds"):
			target = &r.refund
		case strings.HasPrefix(req.URL.Path, "/v1/captures"):
			target = &r.capture
		case strings.HasPrefix(req.URL.Path, "/v1/voids"):
			target = &r.void
		}
		if err := json.Unmarshal(b, target); err != nil {
			return r, fmt.Errorf("%w: decoding %s %s: %w", errBadAnswer, req.URL.Path, b, err)
		}
		return r, nil
	}
	var eb struct {
		Error string `json:"error"`
	}
	if err := json.Unmarshal(b, &eb); err != nil || eb.Error == "" {
		return r, fmt.Errorf("%w: HTTP %d: body %s is not an error body (%v)", errBadAnswer, resp.StatusCode, b, err)
	}
	r.code = eb.Error
	return r, nil
}

func createReq(t *testing.T, base, key string, p any) *http.Request {
	t.Helper()
	return postReq(t, base+"/v1/charges", key, p)
}

// postReq is a POST of p as JSON to u with the idempotency key key (none if
// empty); a []byte p is sent as it is.
func postReq(t *testing.T, u, key string, p any) *http.Request {
	t.Helper()
	b, ok := p.([]byte)
	if !ok {
		var err error
		if b, err = json.Marshal(p); err != nil {
			t.Fatal(err)
		}
	}
	req, err := http.NewRequest(http.MethodPost, u, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	return req
}

func create(t *testing.T, base, key string, p any) response {
	t.Helper()
	r, err := do(context.Background(), nil, createReq(t, base, key, p))
	if err != nil {
		t.Fatalf("create %q: %v", key, err)
	}
	return r
}

func lookup(t *testing.T, base, key string) response {
	t.Helper()
	return get(t, base+"/v1/charges?"+url.Values{"idempotencyKey": {key}}.Encode())
}

// get sends a GET of u and decodes the answer.
func get(t *testing.T, u string) response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := do(context.Background(), nil, req)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	return r
}

func TestCreateByPaymentMethod(t *testing.T) {
	tests := []struct {
		method      string
		status      provider.Status
		declineCode string
	}{
		{sim.MethodVisa, provider.StatusSucceeded, ""},
		{sim.MethodMastercard, provider.StatusSucceeded, ""},
		{sim.MethodLookupFlaky, provider.StatusSucceeded, ""},
		{sim.MethodRefundDeclined, provider.StatusSucceeded, ""},
		{sim.MethodRefundTimeoutAfterSuccess, provider.StatusSucceeded, ""},
		{sim.MethodCaptureDeclined, provider.StatusSucceeded, ""},
		{sim.MethodCaptureTimeoutAfterSuccess, provider.StatusSucceeded, ""},
		{sim.MethodChargeDeclined, provider.StatusDeclined, sim.DeclineGeneric},
		{sim.MethodInsufficientFunds, provider.StatusDeclined, sim.DeclineInsufficientFunds},
		{"pm_card_amex_unknown", provider.StatusDeclined, sim.DeclineUnsupportedMethod},
	}
	for _, tt := range tests {
		t.Run(tt.method, func(t *testing.T) {
			fc := clock.NewFake(t0)
			s, base := newServer(t, sim.Options{Clock: fc})
			r := create(t, base, "key-"+tt.method, params(tt.method))
			if r.status != http.StatusOK {
				t.Fatalf("status = %d, body %s", r.status, r.raw)
			}
			want := sim.ChargeRecord{
				ID:             r.charge.ID,
				IdempotencyKey: "key-" + tt.method,
				Status:         tt.status,
				DeclineCode:    tt.declineCode,
				AmountMinor:    1000,
				Amount:         "10.00",
				Currency:       "EUR",
				PaymentMethod:  tt.method,
				Description:    "order 7",
				PaymentID:      "pay_1",
				CreatedAt:      t0,
				CaptureMethod:  sim.CaptureAutomatic,
				AmountCaptured: "0.00",
				RequestCount:   1,
			}
			if tt.status == provider.StatusSucceeded {
				want.AmountCapturedMinor, want.AmountCaptured = 1000, "10.00"
			}
			if r.charge != want {
				t.Errorf("charge =\n%+v\nwant\n%+v", r.charge, want)
			}
			if !strings.HasPrefix(r.charge.ID, "ch_") || len(r.charge.ID) < 10 {
				t.Errorf("id = %q, want ch_ and a random suffix", r.charge.ID)
			}
			if got := s.Charges(); len(got) != 1 || got[0] != want {
				t.Errorf("Charges() = %+v, want [%+v]", got, want)
			}
		})
	}
}

func TestReplaySameKeySameParameters(t *testing.T) {
	for _, method := range []string{sim.MethodVisa, sim.MethodChargeDeclined} {
		t.Run(method, func(t *testing.T) {
			s, base := newServer(t, sim.Options{})
			first := create(t, base, "k1", params(method))
			second := create(t, base, "k1", params(method))
			if first.status != http.StatusOK || second.status != http.StatusOK {
				t.Fatalf("statuses %d, %d", first.status, second.status)
			}
			if second.charge.ID != first.charge.ID || second.charge.Status != first.charge.Status {
				t.Errorf("replay = %+v, want the stored charge %+v", second.charge, first.charge)
			}
			if second.charge.RequestCount != 2 {
				t.Errorf("replay requestCount = %d, want 2", second.charge.RequestCount)
			}
			other := create(t, base, "k2", params(method))
			if other.charge.ID == first.charge.ID {
				t.Errorf("another key got the same charge id %s", other.charge.ID)
			}
			got := s.Charges()
			if len(got) != 2 || got[0].RequestCount != 2 || got[1].RequestCount != 1 {
				t.Errorf("Charges() = %+v, want k1 with 2 requests then k2 with 1", got)
			}
		})
	}
}

func TestKeyReusedWithOtherParameters(t *testing.T) {
	changes := map[string]func(*chargeParams){
		"amount":        func(p *chargeParams) { p.AmountMinor = 1001 },
		"currency":      func(p *chargeParams) { p.Currency = "USD" },
		"paymentMethod": func(p *chargeParams) { p.PaymentMethod = sim.MethodMastercard },
		"description":   func(p *chargeParams) { p.Description = "other" },
		"paymentId":     func(p *chargeParams) { p.PaymentID = "pay_2" },
		"captureMethod": func(p *chargeParams) { p.CaptureMethod = sim.CaptureManual },
	}
	for name, change := range changes {
		t.Run(name, func(t *testing.T) {
			s, base := newServer(t, sim.Options{})
			first := create(t, base, "k", params(sim.MethodVisa))
			p := params(sim.MethodVisa)
			change(&p)
			r := create(t, base, "k", p)
			if r.status != http.StatusUnprocessableEntity || r.code != sim.CodeKeyReused {
				t.Fatalf("reuse = %d %s, want 422 %s", r.status, r.raw, sim.CodeKeyReused)
			}
			got := s.Charges()
			if len(got) != 1 || got[0].ID != first.charge.ID || got[0].RequestCount != 1 {
				t.Errorf("Charges() = %+v, want only the first charge, 1 request", got)
			}
		})
	}
}

func TestCreateValidation(t *testing.T) {
	tests := []struct {
		name string
		key  string
		body any
		code string
	}{
		{"missing key", "", params(sim.MethodVisa), sim.CodeKeyMissing},
		{"long key", strings.Repeat("k", 256), params(sim.MethodVisa), sim.CodeKeyInvalid},
		{"malformed json", "k", []byte(`{"amountMinor":`), sim.CodeInvalidRequest},
		{"trailing data", "k", []byte(`{"amountMinor":1,"currency":"EUR","paymentMethod":"pm_card_visa"} {}`), sim.CodeInvalidRequest},
		{"unknown field", "k", map[string]any{"amountMinor": 1, "currency": "EUR", "paymentMethod": "pm_card_visa", "amount": "1"}, sim.CodeInvalidRequest},
		{"zero amount", "k", chargeParams{AmountMinor: 0, Currency: "EUR", PaymentMethod: sim.MethodVisa}, sim.CodeInvalidRequest},
		{"negative amount", "k", chargeParams{AmountMinor: -5, Currency: "EUR", PaymentMethod: sim.MethodVisa}, sim.CodeInvalidRequest},
		{"unknown currency", "k", chargeParams{AmountMinor: 5, Currency: "XXX", PaymentMethod: sim.MethodVisa}, sim.CodeInvalidRequest},
		{"lower-case currency", "k", chargeParams{AmountMinor: 5, Currency: "eur", PaymentMethod: sim.MethodVisa}, sim.CodeInvalidRequest},
		{"no payment method", "k", chargeParams{AmountMinor: 5, Currency: "EUR"}, sim.CodeInvalidRequest},
		{"unknown capture method", "k", chargeParams{AmountMinor: 5, Currency: "EUR", PaymentMethod: sim.MethodVisa, CaptureMethod: "later"}, sim.CodeInvalidRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, base := newServer(t, sim.Options{})
			r := create(t, base, tt.key, tt.body)
			if r.status != http.StatusBadRequest || r.code != tt.code {
				t.Errorf("got %d %s, want 400 %s", r.status, r.raw, tt.code)
			}
			if n := len(s.Charges()); n != 0 {
				t.Errorf("%d charges recorded, want 0", n)
			}
		})
	}
}

func TestAmountFormatting(t *testing.T) {
	s, base := newServer(t, sim.Options{})
	for key, p := range map[string]chargeParams{
		"eur": {AmountMinor: 5, Currency: "EUR", PaymentMethod: sim.MethodVisa},
		"jpy": {AmountMinor: 1000, Currency: "JPY", PaymentMethod: sim.MethodVisa},
		"kwd": {AmountMinor: 1234, Currency: "KWD", PaymentMethod: sim.MethodVisa},
	} {
		if r := create(t, base, key, p); r.status != http.StatusOK {
			t.Fatalf("create %s: %d %s", key, r.status, r.raw)
		}
	}
	want := map[string]string{"eur": "0.05", "jpy": "1000", "kwd": "1.234"}
	for _, c := range s.Charges() {
		if c.Amount != want[c.IdempotencyKey] {
			t.Errorf("%s amount = %q, want %q", c.IdempotencyKey, c.Amount, want[c.IdempotencyKey])
		}
	}
}

func TestUnavailableRecordsNothing(t *testing.T) {
	s, base := newServer(t, sim.Options{})
	for range 2 {
		r := create(t, base, "k", params(sim.MethodUnavailable))
		if r.status != http.StatusServiceUnavailable || r.code != sim.CodeUnavailable {
			t.Fatalf("got %d %s, want 503 unavailable", r.status, r.raw)
		}
	}
	if got := s.Charges(); len(got) != 0 {
		t.Errorf("Charges() = %+v, want none", got)
	}
	if r := lookup(t, base, "k"); r.status != http.StatusNotFound {
		t.Errorf("lookup after 503 = %d %s, want 404", r.status, r.raw)
	}
}

func TestSlow(t *testing.T) {
	const delay = 150 * time.Millisecond
	s, base := newServer(t, sim.Options{SlowDelay: delay})

	start := time.Now()
	r := create(t, base, "patient", params(sim.MethodSlow))
	if elapsed := time.Since(start); elapsed < delay {
		t.Errorf("slow create answered after %v, want at least %v", elapsed, delay)
	}
	if r.status != http.StatusOK || r.charge.Status != provider.StatusSucceeded {
		t.Fatalf("slow create = %d %s", r.status, r.raw)
	}

	// A client that gives up before the delay gets nothing, but the charge
	// is recorded, and the retry answers at once with it.
	ctx, cancel := context.WithTimeout(context.Background(), delay/3)
	defer cancel()
	if _, err := do(ctx, nil, createReq(t, base, "impatient", params(sim.MethodSlow))); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("impatient create err = %v, want deadline exceeded", err)
	}
	got := s.Charges()
	if len(got) != 2 || got[1].IdempotencyKey != "impatient" || got[1].Status != provider.StatusSucceeded {
		t.Fatalf("Charges() = %+v, want the impatient charge recorded as succeeded", got)
	}
	start = time.Now()
	retry := create(t, base, "impatient", params(sim.MethodSlow))
	if elapsed := time.Since(start); elapsed >= delay {
		t.Errorf("retry took %v, want an immediate answer", elapsed)
	}
	if retry.charge.ID != got[1].ID || retry.charge.RequestCount != 2 {
		t.Errorf("retry = %+v, want charge %s with requestCount 2", retry.charge, got[1].ID)
	}
}

func TestTimeoutAfterSuccessDropsTheResponse(t *testing.T) {
	const hang = 200 * time.Millisecond
	s, base := newServer(t, sim.Options{HangFor: hang})
	// A fresh connection, so that net/http cannot transparently resend the
	// request on another one.
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

	start := time.Now()
	_, err := do(context.Background(), hc, createReq(t, base, "lost", params(sim.MethodTimeoutAfterSuccess)))
	if err == nil {
		t.Fatal("create answered; want the connection dropped without a response")
	}
	if !errors.Is(err, io.EOF) && !strings.Contains(err.Error(), "EOF") && !strings.Contains(err.Error(), "reset") {
		t.Errorf("err = %v, want EOF or reset", err)
	}
	if elapsed := time.Since(start); elapsed < hang {
		t.Errorf("connection dropped after %v, want after HangFor %v", elapsed, hang)
	}
	got := s.Charges()
	if len(got) != 1 || got[0].Status != provider.StatusSucceeded || got[0].IdempotencyKey != "lost" {
		t.Fatalf("Charges() = %+v, want one succeeded charge", got)
	}

	start = time.Now()
	r := create(t, base, "lost", params(sim.MethodTimeoutAfterSuccess))
	if elapsed := time.Since(start); elapsed >= hang {
		t.Errorf("retry took %v, want an immediate answer", elapsed)
	}
	if r.status != http.StatusOK || r.charge.ID != got[0].ID || r.charge.RequestCount != 2 {
		t.Errorf("retry = %d %+v, want charge %s with requestCount 2", r.status, r.charge, got[0].ID)
	}
	if l := lookup(t, base, "lost"); l.status != http.StatusOK || l.charge.ID != got[0].ID {
		t.Errorf("lookup = %d %s, want charge %s", l.status, l.raw, got[0].ID)
	}
}

func TestTimeoutAfterSuccessReturnsWhenClientGoesAway(t *testing.T) {
	s := sim.New(sim.Options{HangFor: time.Hour})
	ts := httptest.NewServer(s)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := do(ctx, nil, createReq(t, ts.URL, "k", params(sim.MethodTimeoutAfterSuccess))); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want deadline exceeded", err)
	}
	// httptest.Server.Close waits for every handler to return: with an
	// hour-long HangFor it only returns promptly if the handler noticed
	// that the client went away.
	done := make(chan struct{})
	go func() { ts.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the hanging handler did not return after the client went away")
	}
	if n := len(s.Charges()); n != 1 {
		t.Errorf("%d charges, want 1", n)
	}
}

func TestLookup(t *testing.T) {
	s, base := newServer(t, sim.Options{})
	if r := lookup(t, base, "never"); r.status != http.StatusNotFound || r.code != sim.CodeNotFound {
		t.Errorf("unknown key = %d %s, want 404 not_found", r.status, r.raw)
	}
	created := create(t, base, "a/b c&d=e", params(sim.MethodChargeDeclined))
	r := lookup(t, base, "a/b c&d=e")
	if r.status != http.StatusOK || r.charge.ID != created.charge.ID || r.charge.DeclineCode != sim.DeclineGeneric {
		t.Errorf("lookup = %d %s, want the declined charge %s", r.status, r.raw, created.charge.ID)
	}
	if r.charge.LookupCount != 1 || r.charge.RequestCount != 1 {
		t.Errorf("lookupCount, requestCount = %d, %d, want 1, 1", r.charge.LookupCount, r.charge.RequestCount)
	}
	req, _ := http.NewRequest(http.MethodGet, base+"/v1/charges", nil)
	if r, err := do(context.Background(), nil, req); err != nil || r.status != http.StatusBadRequest {
		t.Errorf("lookup without key = %+v, %v; want 400", r, err)
	}
	if n := len(s.Charges()); n != 1 {
		t.Errorf("lookups changed the charges: %d", n)
	}
}

func TestLookupFlaky(t *testing.T) {
	for _, tt := range []struct {
		name  string
		flaky int
		fails int
	}{{"default", 0, 2}, {"three", 3, 3}, {"none", -1, 0}} {
		t.Run(tt.name, func(t *testing.T) {
			_, base := newServer(t, sim.Options{FlakyLookups: tt.flaky})
			created := create(t, base, "flaky", params(sim.MethodLookupFlaky))
			if created.status != http.StatusOK || created.charge.Status != provider.StatusSucceeded {
				t.Fatalf("create = %d %s", created.status, created.raw)
			}
			for i := range tt.fails {
				if r := lookup(t, base, "flaky"); r.status != http.StatusServiceUnavailable || r.code != sim.CodeUnavailable {
					t.Fatalf("lookup %d = %d %s, want 503", i+1, r.status, r.raw)
				}
			}
			for range 2 {
				if r := lookup(t, base, "flaky"); r.status != http.StatusOK || r.charge.ID != created.charge.ID {
					t.Fatalf("lookup after %d failures = %d %s, want the charge", tt.fails, r.status, r.raw)
				}
			}
			// Creates are not flaky.
			if r := create(t, base, "flaky", params(sim.MethodLookupFlaky)); r.status != http.StatusOK {
				t.Errorf("replay = %d %s", r.status, r.raw)
			}
		})
	}
}

func TestKeyTTL(t *testing.T) {
	const ttl = time.Hour
	fc := clock.NewFake(t0)
	s, base := newServer(t, sim.Options{Clock: fc, KeyTTL: ttl})

	first := create(t, base, "k", params(sim.MethodVisa))
	create(t, base, "old", params(sim.MethodVisa))
	fc.Advance(ttl - time.Microsecond)
	if r := create(t, base, "k", params(sim.MethodVisa)); r.charge.ID != first.charge.ID {
		t.Fatalf("just inside the TTL: got charge %s, want the stored %s", r.charge.ID, first.charge.ID)
	}
	fc.Advance(time.Microsecond)

	// Past the TTL a lookup still finds the old charge...
	if r := lookup(t, base, "old"); r.status != http.StatusOK || r.charge.CreatedAt != t0 {
		t.Errorf("lookup past TTL = %d %s, want the old charge", r.status, r.raw)
	}
	// ...but a create, even with other parameters, is a new charge.
	p := params(sim.MethodVisa)
	p.AmountMinor = 2000
	second := create(t, base, "k", p)
	if second.status != http.StatusOK || second.charge.ID == first.charge.ID {
		t.Fatalf("create past TTL = %d %s, want a new charge", second.status, second.raw)
	}
	if second.charge.RequestCount != 1 || !second.charge.CreatedAt.Equal(t0.Add(ttl)) {
		t.Errorf("new charge = %+v, want requestCount 1 created at %v", second.charge, t0.Add(ttl))
	}
	// Lookup answers the newest charge for the key; the new key window
	// starts from the new charge.
	if r := lookup(t, base, "k"); r.charge.ID != second.charge.ID {
		t.Errorf("lookup = %s, want the newest charge %s", r.charge.ID, second.charge.ID)
	}
	if r := create(t, base, "k", p); r.charge.ID != second.charge.ID || r.charge.RequestCount != 2 {
		t.Errorf("replay of the new charge = %+v", r.charge)
	}
	got := s.Charges()
	if len(got) != 3 || got[0].ID != first.charge.ID || got[2].ID != second.charge.ID {
		t.Fatalf("Charges() = %+v, want first, old, second", got)
	}
	if got[0].RequestCount != 2 || got[0].AmountMinor != 1000 || got[2].AmountMinor != 2000 {
		t.Errorf("Charges() = %+v", got)
	}
}

func TestConcurrentCreatesOneCharge(t *testing.T) {
	for _, method := range []string{sim.MethodVisa, sim.MethodSlow} {
		t.Run(method, func(t *testing.T) {
			s, base := newServer(t, sim.Options{SlowDelay: 50 * time.Millisecond})
			const n = 50
			ids := make([]string, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range n {
				wg.Go(func() {
					<-start
					r, err := do(context.Background(), nil, createReq(t, base, "same", params(method)))
					if err == nil && r.status != http.StatusOK {
						err = fmt.Errorf("HTTP %d %s", r.status, r.raw)
					}
					ids[i], errs[i] = r.charge.ID, err
				})
			}
			close(start)
			wg.Wait()
			for i := range n {
				if errs[i] != nil {
					t.Fatalf("request %d: %v", i, errs[i])
				}
				if ids[i] != ids[0] {
					t.Fatalf("request %d got charge %s, request 0 got %s", i, ids[i], ids[0])
				}
			}
			got := s.Charges()
			if len(got) != 1 || got[0].RequestCount != n || got[0].ID != ids[0] {
				t.Fatalf("Charges() = %+v, want one charge with requestCount %d", got, n)
			}
		})
	}
}

func TestListAndHealth(t *testing.T) {
	_, base := newServer(t, sim.Options{})
	a := create(t, base, "a", params(sim.MethodVisa))
	create(t, base, "a", params(sim.MethodVisa))
	b := create(t, base, "b", chargeParams{AmountMinor: 1234, Currency: "KWD", PaymentMethod: sim.MethodInsufficientFunds})

	resp, err := http.Get(base + "/_sim/charges")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list struct {
		Charges []map[string]any `json:"charges"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /_sim/charges: %d %v", resp.StatusCode, err)
	}
	if len(list.Charges) != 2 {
		t.Fatalf("listed %d charges, want 2: %v", len(list.Charges), list.Charges)
	}
	want := []map[string]any{
		{"id": a.charge.ID, "idempotencyKey": "a", "amount": "10.00", "amountMinor": 1000.0, "currency": "EUR", "status": "succeeded", "requestCount": 2.0,
			"captureMethod": "automatic", "amountCaptured": "10.00", "amountCapturedMinor": 1000.0, "captureRequestCount": 0.0, "voidRequestCount": 0.0},
		{"id": b.charge.ID, "idempotencyKey": "b", "amount": "1.234", "amountMinor": 1234.0, "currency": "KWD", "status": "declined", "declineCode": "insufficient_funds", "requestCount": 1.0,
			"amountCaptured": "0.000", "amountCapturedMinor": 0.0},
	}
	for i, w := range want {
		for k, v := range w {
			if list.Charges[i][k] != v {
				t.Errorf("charge %d: %s = %v, want %v", i, k, list.Charges[i][k], v)
			}
		}
	}

	hr, err := http.Get(base + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	hr.Body.Close()
	if hr.StatusCode != http.StatusOK {
		t.Errorf("GET /healthz = %d", hr.StatusCode)
	}
}

func TestStart(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := sim.Start(ctx, "127.0.0.1:0", sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(srv.URL(), "http://127.0.0.1:") {
		t.Errorf("URL() = %q", srv.URL())
	}
	r := create(t, srv.URL(), "k", params(sim.MethodVisa))
	if got := srv.Simulator().Charges(); len(got) != 1 || got[0].ID != r.charge.ID {
		t.Errorf("Simulator().Charges() = %+v, want charge %s", got, r.charge.ID)
	}

	// The end of ctx stops the server.
	cancel()
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := http.Get(srv.URL() + "/healthz")
		if err != nil {
			break
		}
		resp.Body.Close()
		if time.Now().After(deadline) {
			t.Fatal("server still answering after its context ended")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Errorf("Shutdown after stop = %v, want nil", err)
	}
}

func TestStartListenError(t *testing.T) {
	if _, err := sim.Start(context.Background(), "127.0.0.1:not-a-port", sim.Options{}); err == nil {
		t.Fatal("Start with a bad address succeeded")
	}
}

func TestShutdownDropsHangingRequests(t *testing.T) {
	srv, err := sim.Start(context.Background(), "", sim.Options{HangFor: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		_, err := do(context.Background(), hc, createReq(t, srv.URL(), "k", params(sim.MethodTimeoutAfterSuccess)))
		errc <- err
	}()
	// Wait until the charge is recorded, so the request is hanging.
	for deadline := time.Now().Add(5 * time.Second); len(srv.Simulator().Charges()) == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the charge was never recorded")
		}
		time.Sleep(5 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown = %v", err)
	}
	if elapsed := time.Since(start); elapsed > 2*time.Second {
		t.Errorf("Shutdown took %v with a hanging request", elapsed)
	}
	if err := <-errc; err == nil {
		t.Error("the hanging request got an answer; want the connection dropped")
	}
	if err := srv.Close(); err != nil {
		t.Errorf("Close after Shutdown = %v", err)
	}
}

func TestClose(t *testing.T) {
	srv, err := sim.Start(context.Background(), "127.0.0.1:0", sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Close(); err != nil {
		t.Fatalf("Close = %v", err)
	}
	if resp, err := http.Get(srv.URL() + "/healthz"); err == nil {
		resp.Body.Close()
		t.Fatal("server answering after Close")
	}
}
