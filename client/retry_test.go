package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/client"
)

// fakeClock runs the retry policy without waiting: Sleep records the wait
// and moves the clock.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	sleeps []time.Duration
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Now()} }

func (f *fakeClock) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sleeps = append(f.sleeps, d)
	f.now = f.now.Add(d)
	return ctx.Err()
}

func (f *fakeClock) waits() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Duration(nil), f.sleeps...)
}

// scripted is a server that answers each request with the next step of its
// script (the last step repeats) and records what it received.
type scripted struct {
	t     *testing.T
	srv   *httptest.Server
	mu    sync.Mutex
	steps []step
	got   []*http.Request
}

// step answers one request.
type step func(w http.ResponseWriter, r *http.Request)

func newScripted(t *testing.T, steps ...step) *scripted {
	t.Helper()
	s := &scripted{t: t, steps: steps}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		i := min(len(s.got), len(s.steps)-1)
		s.got = append(s.got, r.Clone(context.Background()))
		s.mu.Unlock()
		s.steps[i](w, r)
	}))
	// A fresh connection per request: net/http resends a request with an
	// Idempotency-Key by itself when a kept-alive connection turns out
	// closed, which would hide the attempts counted here.
	s.srv.Config.SetKeepAlivesEnabled(false)
	t.Cleanup(s.srv.Close)
	return s
}

func (s *scripted) requests() []*http.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*http.Request(nil), s.got...)
}

// client returns a Client of s with a fake clock and a fixed jitter.
func (s *scripted) client(clk *fakeClock, jitter float64, policy client.RetryPolicy) *client.Client {
	s.t.Helper()
	c, err := client.New(client.Config{
		BaseURL: s.srv.URL, APIKey: "sk_test", Retry: policy, Clock: clk, Rand: func() float64 { return jitter },
	})
	if err != nil {
		s.t.Fatal(err)
	}
	return c
}

const paymentJSON = `{"paymentId":"pay_1","status":"SUCCEEDED","accountId":"acc_1","amount":"10.00","currency":"EUR",` +
	`"merchantReference":"inv-1","paymentMethod":"pm_card_visa","channel":"web","description":"",` +
	`"createdAt":"2026-01-15T10:30:00Z","updatedAt":"2026-01-15T10:30:01Z"}`

const processingJSON = `{"paymentId":"pay_1","status":"PROCESSING","accountId":"acc_1","amount":"10.00","currency":"EUR",` +
	`"merchantReference":"inv-1","paymentMethod":"pm_card_visa","channel":"web","description":"",` +
	`"createdAt":"2026-01-15T10:30:00Z","updatedAt":"2026-01-15T10:30:01Z"}`

func created(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/payments/pay_1")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprint(w, paymentJSON)
}

func stillProcessing(retryAfter string) step {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "/payments/pay_1")
		w.Header().Set("Retry-After", retryAfter)
		w.WriteHeader(http.StatusAccepted)
		fmt.Fprint(w, processingJSON)
	}
}

// problem answers a problem document; retryAfter "" sends none.
func problem(status int, code, retryAfter string) step {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		if retryAfter != "" {
			w.Header().Set("Retry-After", retryAfter)
		}
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"type":"https://paymentsapi.dev/problems/x","title":"t","status":%d,"detail":"detail of %s","code":%q,"paymentId":"pay_1","declineCode":"generic_decline"}`,
			status, code, code)
	}
}

// dropConnection answers nothing: the client sees a network error.
func dropConnection(w http.ResponseWriter, _ *http.Request) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err == nil {
		_ = conn.Close()
	}
}

func payReq() client.CreatePaymentRequest {
	return client.CreatePaymentRequest{AccountID: "acc_1", Amount: "10.00", Currency: "EUR", MerchantReference: "inv-1", PaymentMethod: "pm_card_visa"}
}

func TestCreateRetriesUnderOneKeyUntilCreated(t *testing.T) {
	t.Parallel()
	s := newScripted(t, problem(503, "PROVIDER_UNAVAILABLE", ""), dropConnection, problem(500, "INTERNAL", ""), created)
	clk := newFakeClock()
	res, err := s.client(clk, 0.5, client.RetryPolicy{}).CreatePayment(context.Background(), payReq())
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != 201 || res.Attempts != 4 || res.Payment.PaymentID != "pay_1" || res.Location != "/payments/pay_1" {
		t.Errorf("result %+v, want 201 pay_1 after 4 attempts", res)
	}
	reqs := s.requests()
	if len(reqs) != 4 {
		t.Fatalf("%d requests, want 4", len(reqs))
	}
	key := reqs[0].Header.Get("Idempotency-Key")
	if key == "" || key != res.IdempotencyKey {
		t.Errorf("first key %q, result's key %q", key, res.IdempotencyKey)
	}
	for i, r := range reqs {
		if got := r.Header.Get("Idempotency-Key"); got != key {
			t.Errorf("attempt %d carried key %q, want the first attempt's %q", i+1, got, key)
		}
		if got := r.Header.Get("Authorization"); got != "Bearer sk_test" {
			t.Errorf("attempt %d: Authorization %q", i+1, got)
		}
		if r.Header.Values("Prefer") != nil {
			t.Errorf("attempt %d sent Prefer %q without WithPreferWait", i+1, r.Header.Values("Prefer"))
		}
	}
	// Full jitter at r=0.5 under ceilings 250 ms, 500 ms, 1 s.
	want := []time.Duration{125 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond}
	if got := clk.waits(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("waits %v, want %v", got, want)
	}

	// A second call is another logical operation: another key.
	s2 := newScripted(t, created)
	res2, err := s2.client(newFakeClock(), 0.5, client.RetryPolicy{}).CreatePayment(context.Background(), payReq())
	if err != nil {
		t.Fatal(err)
	}
	if res2.IdempotencyKey == key {
		t.Errorf("two calls shared the key %q", key)
	}
}

func TestCreateUsesTheCallersKey(t *testing.T) {
	t.Parallel()
	s := newScripted(t, problem(503, "SERVICE_UNAVAILABLE", "1"), created)
	res, err := s.client(newFakeClock(), 0, client.RetryPolicy{}).CreatePayment(context.Background(), payReq(),
		client.WithIdempotencyKey("order-7781"), client.WithPreferWait(1500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range s.requests() {
		if got := r.Header.Get("Idempotency-Key"); got != "order-7781" {
			t.Errorf("attempt %d: key %q, want order-7781", i+1, got)
		}
		if got := r.Header.Get("Prefer"); got != "wait=2" {
			t.Errorf("attempt %d: Prefer %q, want wait=2 (1.5 s rounded up)", i+1, got)
		}
	}
	if res.IdempotencyKey != "order-7781" || res.Attempts != 2 {
		t.Errorf("result %+v", res)
	}
}

func TestCreateNeverRetriesAFinalAnswer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status int
		code   string
	}{
		{400, "VALIDATION_FAILED"}, {400, "IDEMPOTENCY_KEY_INVALID"}, {401, "UNAUTHORIZED"}, {402, "PAYMENT_DECLINED"},
		{404, "NOT_FOUND"}, {409, "DUPLICATE_MERCHANT_REFERENCE"}, {409, "IDEMPOTENCY_KEY_EXPIRED"},
		{413, "PAYLOAD_TOO_LARGE"}, {415, "UNSUPPORTED_MEDIA_TYPE"}, {422, "IDEMPOTENCY_KEY_REUSED"},
	} {
		t.Run(strconv.Itoa(tc.status)+" "+tc.code, func(t *testing.T) {
			t.Parallel()
			s := newScripted(t, problem(tc.status, tc.code, "1"), created)
			clk := newFakeClock()
			res, err := s.client(clk, 0.5, client.RetryPolicy{}).CreatePayment(context.Background(), payReq())
			if err == nil {
				t.Fatalf("no error, result %+v", res)
			}
			if n := len(s.requests()); n != 1 {
				t.Errorf("%d requests, want 1: a %d is final", n, tc.status)
			}
			if w := clk.waits(); len(w) != 0 {
				t.Errorf("waited %v", w)
			}
			var p *client.Error
			if !errors.As(err, &p) || p.Status != tc.status || string(p.Code) != tc.code || p.Detail != "detail of "+tc.code || p.PaymentID != "pay_1" {
				t.Fatalf("error %v (%#v), want the problem %d %s", err, p, tc.status, tc.code)
			}
			var declined *client.DeclinedError
			if isDecline := errors.As(err, &declined); isDecline != (tc.status == 402) {
				t.Errorf("DeclinedError: %v, want it only for 402", isDecline)
			} else if isDecline && declined.Problem.DeclineCode != "generic_decline" {
				t.Errorf("decline without its declineCode: %+v", declined.Problem)
			}
		})
	}
}

func TestCreateRetriesWhatMaySucceedOnARepeat(t *testing.T) {
	t.Parallel()
	for name, first := range map[string]step{
		"500":                        problem(500, "INTERNAL", ""),
		"502 from a proxy":           func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "bad gateway", http.StatusBadGateway) },
		"503 provider":               problem(503, "PROVIDER_UNAVAILABLE", "1"),
		"429":                        problem(429, "RATE_LIMITED", "1"),
		"409 IDEMPOTENCY_KEY_IN_USE": problem(409, "IDEMPOTENCY_KEY_IN_USE", "1"),
		"202":                        stillProcessing("1"),
		"connection dropped":         dropConnection,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := newScripted(t, first, created)
			res, err := s.client(newFakeClock(), 0.5, client.RetryPolicy{}).CreatePayment(context.Background(), payReq())
			if err != nil {
				t.Fatal(err)
			}
			if res.StatusCode != 201 || res.Attempts != 2 {
				t.Errorf("result %+v, want 201 on the second attempt", res)
			}
		})
	}
}

func TestRetryAfterIsAFloorUnderTheJitter(t *testing.T) {
	t.Parallel()
	date := func(clk *fakeClock) string { return clk.Now().Add(4 * time.Second).UTC().Format(http.TimeFormat) }
	clk := newFakeClock()
	s := newScripted(t, problem(429, "RATE_LIMITED", "3"), problem(503, "SERVICE_UNAVAILABLE", date(clk)), problem(503, "SERVICE_UNAVAILABLE", "0"), created)
	if _, err := s.client(clk, 0.5, client.RetryPolicy{}).CreatePayment(context.Background(), payReq()); err != nil {
		t.Fatal(err)
	}
	waits := clk.waits()
	if len(waits) != 3 {
		t.Fatalf("waits %v, want 3", waits)
	}
	if waits[0] != 3*time.Second {
		t.Errorf("after Retry-After: 3 waited %s, want 3s (more than the 125 ms of jitter)", waits[0])
	}
	// The HTTP-date form, read on the fake clock (which moved 3 s): 1 s
	// left, whole seconds only in the header.
	if waits[1] < 0 || waits[1] > 2*time.Second {
		t.Errorf("after a Retry-After date 4 s ahead, 3 s later: waited %s, want about 1 s", waits[1])
	}
	if waits[2] != 500*time.Millisecond {
		t.Errorf("after Retry-After: 0 waited %s, want the jitter, 500 ms", waits[2])
	}
}

func TestTooLongARetryAfterEndsTheCall(t *testing.T) {
	t.Parallel()
	s := newScripted(t, problem(503, "SERVICE_UNAVAILABLE", "120"), created)
	_, err := s.client(newFakeClock(), 0.5, client.RetryPolicy{MaxRetryAfter: time.Minute}).CreatePayment(context.Background(), payReq())
	var p *client.Error
	if !errors.As(err, &p) || p.Status != 503 || p.RetryAfter != 120*time.Second {
		t.Fatalf("error %v, want the 503 with its Retry-After", err)
	}
	if n := len(s.requests()); n != 1 {
		t.Errorf("%d requests, want 1", n)
	}
}

func TestAttemptsAreBoundedAndTheCapHolds(t *testing.T) {
	t.Parallel()
	s := newScripted(t, problem(503, "SERVICE_UNAVAILABLE", ""))
	clk := newFakeClock()
	policy := client.RetryPolicy{MaxAttempts: 8, BaseDelay: 100 * time.Millisecond, MaxDelay: time.Second, Budget: client.Budget{Ratio: 1, Burst: 100}}
	_, err := s.client(clk, 0.999, policy).CreatePayment(context.Background(), payReq())
	var p *client.Error
	if !errors.As(err, &p) || p.Status != 503 {
		t.Fatalf("error %v, want the last 503", err)
	}
	if n := len(s.requests()); n != 8 {
		t.Errorf("%d requests, want MaxAttempts = 8", n)
	}
	ceilings := []time.Duration{100, 200, 400, 800, 1000, 1000, 1000}
	waits := clk.waits()
	if len(waits) != len(ceilings) {
		t.Fatalf("waits %v, want %d", waits, len(ceilings))
	}
	for i, w := range waits {
		ceiling := ceilings[i] * time.Millisecond
		if w >= ceiling || w < ceiling*99/100 {
			t.Errorf("wait %d: %s, want just under its ceiling %s", i+1, w, ceiling)
		}
	}
}

func TestTheRetryBudgetIsSharedByTheClientsCalls(t *testing.T) {
	t.Parallel()
	s := newScripted(t, problem(503, "SERVICE_UNAVAILABLE", ""))
	c := s.client(newFakeClock(), 0, client.RetryPolicy{MaxAttempts: 5, Budget: client.Budget{Ratio: 0.25, Burst: 2}})
	attempts := func() int {
		t.Helper()
		before := len(s.requests())
		_, err := c.GetPayment(context.Background(), "pay_1")
		if err == nil {
			t.Fatal("no error from a server that answers 503")
		}
		return len(s.requests()) - before
	}
	// The burst: two retries, then the budget is empty.
	s1 := len(s.requests())
	_, err := c.CreatePayment(context.Background(), payReq())
	if !errors.Is(err, client.ErrBudgetExhausted) {
		t.Errorf("error %v, want ErrBudgetExhausted", err)
	}
	var p *client.Error
	if !errors.As(err, &p) || p.Status != 503 {
		t.Errorf("error %v does not carry the last answer", err)
	}
	if n := len(s.requests()) - s1; n != 3 {
		t.Errorf("first call: %d attempts, want 3 (two retries of the burst of 2)", n)
	}
	// Each call earns a quarter of a retry: three calls without, the fourth
	// with one. The budget is the client's, not the operation's.
	for i, want := range []int{1, 1, 1, 2, 1, 1, 1, 2} {
		if got := attempts(); got != want {
			t.Errorf("call %d after the burst: %d attempts, want %d", i+1, got, want)
		}
	}
}

func TestNoRetryPastTheCallersDeadline(t *testing.T) {
	t.Parallel()
	s := newScripted(t, problem(503, "SERVICE_UNAVAILABLE", "5"), created)
	clk := newFakeClock()
	ctx, cancel := context.WithDeadline(context.Background(), clk.Now().Add(2*time.Second))
	defer cancel()
	_, err := s.client(clk, 0.5, client.RetryPolicy{}).CreatePayment(ctx, payReq())
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error %v, want DeadlineExceeded", err)
	}
	var p *client.Error
	if !errors.As(err, &p) || p.Status != 503 {
		t.Errorf("error %v does not carry the last answer", err)
	}
	if n, w := len(s.requests()), clk.waits(); n != 1 || len(w) != 0 {
		t.Errorf("%d requests and waits %v, want one attempt and no wait", n, w)
	}
}

func TestA202AfterTheLastAttemptIsAResult(t *testing.T) {
	t.Parallel()
	s := newScripted(t, stillProcessing("1"))
	res, err := s.client(newFakeClock(), 0.5, client.RetryPolicy{MaxAttempts: 3}).CreatePayment(context.Background(), payReq())
	if err != nil {
		t.Fatalf("a 202 is not an error: %v", err)
	}
	if !res.StillProcessing() || res.Attempts != 3 || res.Payment.Status != client.PaymentProcessing || res.RetryAfter != time.Second {
		t.Errorf("result %+v, want still processing after 3 attempts", res)
	}
}

func TestReadsAreRetriedWithoutAKey(t *testing.T) {
	t.Parallel()
	s := newScripted(t, dropConnection, problem(429, "RATE_LIMITED", "1"), func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, paymentJSON)
	})
	p, err := s.client(newFakeClock(), 0.5, client.RetryPolicy{}).GetPayment(context.Background(), "pay_1")
	if err != nil {
		t.Fatal(err)
	}
	if p.PaymentID != "pay_1" || p.Status != client.PaymentSucceeded {
		t.Errorf("payment %+v", p)
	}
	for i, r := range s.requests() {
		if r.Method != "GET" || r.URL.Path != "/payments/pay_1" || r.Header.Get("Idempotency-Key") != "" {
			t.Errorf("attempt %d: %s %s with key %q", i+1, r.Method, r.URL.Path, r.Header.Get("Idempotency-Key"))
		}
	}
	// A read is never retried on a conflict: only a create can be in flight.
	s = newScripted(t, problem(409, "IDEMPOTENCY_KEY_IN_USE", "1"))
	if _, err := s.client(newFakeClock(), 0.5, client.RetryPolicy{}).GetPayment(context.Background(), "pay_1"); err == nil || len(s.requests()) != 1 {
		t.Errorf("GET answered 409: error %v after %d requests, want an error after 1", err, len(s.requests()))
	}
}
