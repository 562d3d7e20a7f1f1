package client_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/client"
	"github.com/paymentsapi/paymentsapi/internal/apitest"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
)

// The tests in this file run against the real API, in-process, on a real
// PostgreSQL database (see package apitest).

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// exchange is one request a client sent and the status it got (0: none).
type exchange struct {
	method, path, key, prefer string
	status                    int
}

// recorder is a RoundTripper that records every exchange.
type recorder struct {
	mu   sync.Mutex
	seen []exchange
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(req)
	x := exchange{method: req.Method, path: req.URL.Path, key: req.Header.Get("Idempotency-Key"), prefer: req.Header.Get("Prefer")}
	if err == nil {
		x.status = resp.StatusCode
	}
	r.mu.Lock()
	r.seen = append(r.seen, x)
	r.mu.Unlock()
	return resp, err
}

func (r *recorder) exchanges() []exchange {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]exchange(nil), r.seen...)
}

// serverClient returns a Client of url that records its exchanges. It
// waits for real: these tests exercise the policy against the server.
func serverClient(t *testing.T, url, secret string) (*client.Client, *recorder) {
	t.Helper()
	rec := &recorder{}
	c, err := client.New(client.Config{BaseURL: url, APIKey: secret, HTTPClient: &http.Client{Transport: rec}})
	if err != nil {
		t.Fatal(err)
	}
	return c, rec
}

func payment(reference, method string) client.CreatePaymentRequest {
	return client.CreatePaymentRequest{AccountID: "acc_1", Amount: "10.00", Currency: "EUR", MerchantReference: reference, PaymentMethod: method}
}

// oneCharge fails t unless the provider holds exactly one charge for the
// payment, created by requestCount create requests.
func oneCharge(t *testing.T, s *apitest.Server, paymentID string, requestCount int) {
	t.Helper()
	charges := s.Charges(paymentID)
	if len(charges) != 1 || charges[0].RequestCount != requestCount {
		t.Errorf("provider charges of %s: %+v, want one charge with requestCount %d", paymentID, charges, requestCount)
	}
}

func TestServerHappyPath(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{})
	c, rec := serverClient(t, s.URL, s.Secret)
	ctx := context.Background()

	res, err := c.CreatePayment(ctx, payment("inv-1", "pm_card_visa"))
	if err != nil {
		t.Fatal(err)
	}
	p := res.Payment
	if res.StatusCode != 201 || res.Replayed || res.Attempts != 1 || p.Status != client.PaymentSucceeded || p.Amount != "10.00" {
		t.Fatalf("result %+v", res)
	}
	if res.Location != "/payments/"+p.PaymentID {
		t.Errorf("Location %q", res.Location)
	}
	got, err := c.GetPayment(ctx, p.PaymentID)
	if err != nil {
		t.Fatal(err)
	}
	if got.PaymentID != p.PaymentID || got.Status != client.PaymentSucceeded {
		t.Errorf("GetPayment: %+v", got)
	}
	if _, err := c.CreatePayment(ctx, payment("inv-2", "pm_card_mastercard")); err != nil {
		t.Fatal(err)
	}
	page, err := c.ListPayments(ctx, client.ListPaymentsParams{AccountID: "acc_1", Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Items) != 1 || page.Items[0].MerchantReference != "inv-2" || page.NextCursor == "" {
		t.Fatalf("first page: %+v, want the newest payment and a cursor", page)
	}
	last, err := c.ListPayments(ctx, client.ListPaymentsParams{AccountID: "acc_1", Limit: 1, Cursor: page.NextCursor})
	if err != nil {
		t.Fatal(err)
	}
	if len(last.Items) != 1 || last.Items[0].PaymentID != p.PaymentID || last.NextCursor != "" {
		t.Errorf("last page: %+v", last)
	}
	oneCharge(t, s, p.PaymentID, 1)

	var e *client.Error
	if _, err := c.GetPayment(ctx, "pay_unknown"); !errors.As(err, &e) || e.Status != 404 || e.Code != client.CodeNotFound {
		t.Errorf("unknown payment: %v, want 404 NOT_FOUND", err)
	}
	wrongKey, _ := serverClient(t, s.URL, "sk_wrong")
	if _, err := wrongKey.CreatePayment(ctx, payment("inv-3", "pm_card_visa")); !errors.As(err, &e) || e.Code != client.CodeUnauthorized {
		t.Errorf("unknown secret: %v, want 401 UNAUTHORIZED", err)
	}
	for _, x := range rec.exchanges() {
		if x.status == 0 || x.status >= 500 {
			t.Errorf("exchange %+v", x)
		}
	}
}

func TestServerDeclineIsFinalAndTyped(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{})
	c, rec := serverClient(t, s.URL, s.Secret)
	_, err := c.CreatePayment(context.Background(), payment("inv-1", "pm_card_chargeDeclined"))
	var declined *client.DeclinedError
	if !errors.As(err, &declined) {
		t.Fatalf("error %v, want a DeclinedError", err)
	}
	p := declined.Problem
	if p.Status != 402 || p.Code != client.CodePaymentDeclined || p.PaymentID == "" || p.DeclineCode != "generic_decline" {
		t.Errorf("problem %+v", p)
	}
	if n := len(rec.exchanges()); n != 1 {
		t.Errorf("%d requests, want 1: a decline is final", n)
	}
	got, err := c.GetPayment(context.Background(), p.PaymentID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != client.PaymentDeclined || got.DeclineCode != "generic_decline" {
		t.Errorf("declined payment reads %+v", got)
	}
	oneCharge(t, s, p.PaymentID, 1)
}

// lossyProxy forwards to the API; the first POST's answer is read from the
// API and then lost: the proxy closes the client's connection instead.
type lossyProxy struct {
	mu      sync.Mutex
	dropped bool
	keys    []string
}

func (lp *lossyProxy) handler(t *testing.T, target string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		out, err := http.NewRequestWithContext(r.Context(), r.Method, target+r.URL.RequestURI(), bytes.NewReader(body))
		if err != nil {
			t.Error(err)
			return
		}
		out.Header = r.Header.Clone()
		resp, err := http.DefaultTransport.RoundTrip(out)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		answer, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		lp.mu.Lock()
		drop := r.Method == "POST" && !lp.dropped
		lp.dropped = lp.dropped || drop
		if r.Method == "POST" {
			lp.keys = append(lp.keys, r.Header.Get("Idempotency-Key"))
		}
		lp.mu.Unlock()
		if drop { // the server answered; the client never hears it
			dropConnection(w, r)
			return
		}
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(answer)
	})
}

func TestServerLostAnswerIsReplayedUnderTheSameKey(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{})
	lp := &lossyProxy{}
	proxy := httptest.NewServer(lp.handler(t, s.URL))
	proxy.Config.SetKeepAlivesEnabled(false) // see newScripted
	t.Cleanup(proxy.Close)
	c, _ := serverClient(t, proxy.URL, s.Secret)

	res, err := c.CreatePayment(context.Background(), payment("inv-1", "pm_card_visa"))
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != 201 || !res.Replayed || res.Attempts != 2 {
		t.Errorf("outcome %+v, want the replayed 201 on the second attempt", res.Outcome)
	}
	lp.mu.Lock()
	keys := lp.keys
	lp.mu.Unlock()
	if len(keys) != 2 || keys[0] != res.IdempotencyKey || keys[1] != res.IdempotencyKey {
		t.Errorf("the API got keys %q, want %q twice", keys, res.IdempotencyKey)
	}
	// Money moved once: one charge, asked for once (the retry was
	// answered from the idempotency store, not by the provider).
	oneCharge(t, s, res.Payment.PaymentID, 1)
	if n := len(s.Sim.Charges()); n != 1 {
		t.Errorf("the provider holds %d charges, want 1", n)
	}
}

// startSlowOriginal sends a pm_sim_slow create with key from another
// goroutine, and returns once the API has it in flight; wait returns its
// answer's status.
func startSlowOriginal(t *testing.T, s *apitest.Server, key string) (wait func() int) {
	t.Helper()
	c, _ := serverClient(t, s.URL, s.Secret)
	var status int
	done := make(chan struct{})
	go func() {
		defer close(done)
		res, err := c.CreatePayment(context.Background(), payment("inv-slow", "pm_sim_slow"), client.WithIdempotencyKey(key))
		if err != nil {
			t.Errorf("original: %v", err)
			return
		}
		status = res.StatusCode
	}()
	t.Cleanup(func() { <-done })
	deadline := time.Now().Add(10 * time.Second)
	for {
		page, err := c.ListPayments(context.Background(), client.ListPaymentsParams{})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Items) == 1 && page.Items[0].Status == client.PaymentProcessing {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the original never showed up in flight: %+v", page.Items)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return func() int { <-done; return status }
}

func TestServerKeyInUseIsRetriedUntilTheReplay(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{SlowDelay: 2 * time.Second})
	original := startSlowOriginal(t, s, "order-slow-1")
	c, rec := serverClient(t, s.URL, s.Secret)
	res, err := c.CreatePayment(context.Background(), payment("inv-slow", "pm_sim_slow"), client.WithIdempotencyKey("order-slow-1"))
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != 201 || !res.Replayed || res.Attempts < 2 {
		t.Errorf("outcome %+v, want the replayed 201 after at least one 409", res.Outcome)
	}
	seen := rec.exchanges()
	if seen[0].status != 409 {
		t.Errorf("first attempt answered %d, want 409 IDEMPOTENCY_KEY_IN_USE", seen[0].status)
	}
	for _, x := range seen {
		if x.key != "order-slow-1" {
			t.Errorf("an attempt carried key %q", x.key)
		}
	}
	if got := original(); got != 201 {
		t.Errorf("the original answered %d", got)
	}
	oneCharge(t, s, res.Payment.PaymentID, 1)
}

func TestServerPreferWaitHoldsTheRetryForTheOriginal(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{SlowDelay: 2 * time.Second})
	original := startSlowOriginal(t, s, "order-slow-2")
	c, rec := serverClient(t, s.URL, s.Secret)
	res, err := c.CreatePayment(context.Background(), payment("inv-slow", "pm_sim_slow"),
		client.WithIdempotencyKey("order-slow-2"), client.WithPreferWait(8*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != 201 || !res.Replayed || res.Attempts != 1 {
		t.Errorf("outcome %+v, want the replayed 201 at the first attempt: the server held it", res.Outcome)
	}
	if seen := rec.exchanges(); len(seen) != 1 || seen[0].prefer != "wait=8" {
		t.Errorf("exchanges %+v, want one with Prefer: wait=8", seen)
	}
	if got := original(); got != 201 {
		t.Errorf("the original answered %d", got)
	}
	oneCharge(t, s, res.Payment.PaymentID, 1)
}
