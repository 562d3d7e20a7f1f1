package simclient_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/provider"
	"github.com/paymentsapi/paymentsapi/internal/provider/providertest"
	"github.com/paymentsapi/paymentsapi/internal/provider/sim"
	"github.com/paymentsapi/paymentsapi/internal/provider/simclient"
)

// newSim serves a new Simulator with fast delays and returns it with a
// client for it.
func newSim(t *testing.T, opts sim.Options) (*sim.Simulator, *simclient.Client) {
	t.Helper()
	s, ts := providertest.ServeSim(t, opts, 100*time.Millisecond, 150*time.Millisecond)
	return s, simclient.New(ts.URL+"/", ts.Client())
}

// fakeProvider serves h and returns a client for it.
func fakeProvider(t *testing.T, h http.HandlerFunc) *simclient.Client {
	t.Helper()
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	return simclient.New(ts.URL, nil)
}

func TestChargeSucceedsAndDeclines(t *testing.T) {
	s, c := newSim(t, sim.Options{})
	ctx := providertest.Context(t, 5*time.Second)

	ok, err := c.Charge(ctx, providertest.ChargeRequest("k-ok", sim.MethodVisa))
	if err != nil {
		t.Fatalf("Charge: %v", err)
	}
	recs := s.Charges()
	want := provider.Charge{ID: recs[0].ID, IdempotencyKey: "k-ok", Status: provider.StatusSucceeded, AmountMinor: 1000, Currency: "EUR", AmountCapturedMinor: 1000}
	if ok != want {
		t.Errorf("Charge = %+v, want %+v", ok, want)
	}
	if recs[0].Description != "order 7" || recs[0].PaymentID != "pay_1" || recs[0].PaymentMethod != sim.MethodVisa {
		t.Errorf("the simulator recorded %+v, want the request's description, payment id and method", recs[0])
	}

	declined, err := c.Charge(ctx, providertest.ChargeRequest("k-no", sim.MethodInsufficientFunds))
	if err != nil {
		t.Fatalf("a decline is not an error: %v", err)
	}
	if declined.Status != provider.StatusDeclined || declined.DeclineCode != sim.DeclineInsufficientFunds {
		t.Errorf("declined = %+v", declined)
	}

	again, err := c.Charge(ctx, providertest.ChargeRequest("k-ok", sim.MethodVisa))
	if err != nil || again.ID != ok.ID {
		t.Errorf("retry = %+v, %v; want charge %s", again, err, ok.ID)
	}
	if recs := s.Charges(); len(recs) != 2 || recs[0].RequestCount != 2 {
		t.Errorf("Charges() = %+v, want 2 charges, the first requested twice", recs)
	}

	got, err := c.Lookup(ctx, providertest.ChargeLookup("k-no"))
	if err != nil || got != declined {
		t.Errorf("Lookup = %+v, %v; want %+v", got, err, declined)
	}
}

func TestChargeSlowWithinDeadline(t *testing.T) {
	_, c := newSim(t, sim.Options{SlowDelay: 100 * time.Millisecond})
	ch, err := c.Charge(providertest.Context(t, 5*time.Second), providertest.ChargeRequest("k", sim.MethodSlow))
	if err != nil || ch.Status != provider.StatusSucceeded {
		t.Fatalf("Charge = %+v, %v", ch, err)
	}
}

func TestConnectionRefusedIsUnavailable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c := simclient.New("http://"+addr, nil)

	for _, call := range providertest.Calls(c, "k", "ch_1") {
		err := call.Do(providertest.Context(t, 5*time.Second))
		providertest.WantOnly(t, call.Name, err, provider.ErrUnavailable)
		var op *net.OpError
		if !errors.As(err, &op) || op.Op != "dial" {
			t.Errorf("%s: err = %v, want the dial error kept", call.Name, err)
		}
	}
}

func TestTimeoutIsUnknownOutcomeAndTheChargeExists(t *testing.T) {
	s, c := newSim(t, sim.Options{HangFor: time.Minute})
	start := time.Now()
	_, err := c.Charge(providertest.Context(t, 100*time.Millisecond), providertest.ChargeRequest("k", sim.MethodTimeoutAfterSuccess))
	wantTimedOut(t, "Charge", err, start)
	recs := s.Charges()
	if len(recs) != 1 || recs[0].Status != provider.StatusSucceeded {
		t.Fatalf("Charges() = %+v, want the charge recorded as succeeded", recs)
	}

	// Recovery: the lookup finds it, and a retry returns it without a second charge.
	ctx := providertest.Context(t, 5*time.Second)
	got, err := c.Lookup(ctx, providertest.ChargeLookup("k"))
	if err != nil || got.ID != recs[0].ID || got.Status != provider.StatusSucceeded {
		t.Errorf("Lookup = %+v, %v; want charge %s", got, err, recs[0].ID)
	}
	got, err = c.Charge(ctx, providertest.ChargeRequest("k", sim.MethodTimeoutAfterSuccess))
	if err != nil || got.ID != recs[0].ID {
		t.Errorf("retry = %+v, %v; want charge %s", got, err, recs[0].ID)
	}
	if recs := s.Charges(); len(recs) != 1 || recs[0].RequestCount != 2 {
		t.Errorf("Charges() = %+v, want one charge requested twice", recs)
	}
}

// wantTimedOut fails the test unless err, of a call started at start with
// a 100ms deadline, is ErrUnknownOutcome for that deadline and came in time.
func wantTimedOut(t *testing.T, what string, err error, start time.Time) {
	t.Helper()
	providertest.WantOnly(t, what, err, provider.ErrUnknownOutcome)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("%s: err = %v, want context.DeadlineExceeded kept", what, err)
	}
	if elapsed := time.Since(start); elapsed > 2*time.Second {
		t.Errorf("%s took %v; it must honour the context deadline", what, elapsed)
	}
}

func TestDroppedConnectionIsUnknownOutcome(t *testing.T) {
	s := sim.New(sim.Options{HangFor: 50 * time.Millisecond})
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	// No keep-alive, so net/http cannot transparently resend on a fresh
	// connection: the client sees the lost response.
	c := simclient.New(ts.URL, &http.Client{Transport: &http.Transport{DisableKeepAlives: true}})
	_, err := c.Charge(providertest.Context(t, 5*time.Second), providertest.ChargeRequest("k", sim.MethodTimeoutAfterSuccess))
	providertest.WantOnly(t, "Charge", err, provider.ErrUnknownOutcome)
	if errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want the dropped connection, not the deadline", err)
	}
	if n := len(s.Charges()); n != 1 {
		t.Errorf("%d charges, want 1", n)
	}
}

func TestResetAfterRequestIsUnknownOutcome(t *testing.T) {
	var hits atomic.Int32
	c := fakeProvider(t, func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		providertest.HangUp(t, w, true)
	})
	for _, call := range providertest.Calls(c, "k", "ch_1") {
		before := hits.Load()
		providertest.WantOnly(t, call.Name, call.Do(providertest.Context(t, 5*time.Second)), provider.ErrUnknownOutcome)
		if hits.Load() == before {
			t.Errorf("%s: the request never reached the server", call.Name)
		}
	}
}

// TestRefusalOfAResendIsUnknownOutcome: net/http resends a request that
// carries an Idempotency-Key on a new connection when the kept-alive one it
// used dies before answering. The first copy may have been processed, so a
// 503 to the resend proves nothing.
func TestRefusalOfAResendIsUnknownOutcome(t *testing.T) {
	resender := providertest.NewResender(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"error":"unavailable"}`))
	})
	c := fakeProvider(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet { // the lookup that leaves a kept-alive connection
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"error":"not_found"}`))
			return
		}
		resender.ServeHTTP(w, r)
	})
	ctx := providertest.Context(t, 5*time.Second)
	for _, call := range providertest.Calls(c, "k", "ch_1") {
		if call.Lookup {
			continue
		}
		_, err := c.Lookup(ctx, providertest.ChargeLookup("k"))
		providertest.WantOnly(t, "Lookup", err, provider.ErrNotFound)
		providertest.WantOnly(t, call.Name, resender.Do(ctx, call), provider.ErrUnknownOutcome)
	}
}

func TestRefusedIsUnavailable(t *testing.T) {
	c := fakeProvider(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"error":"unavailable"}`))
	})
	for _, call := range providertest.Calls(c, "k", "ch_1") {
		providertest.WantOnly(t, call.Name, call.Do(providertest.Context(t, 5*time.Second)), provider.ErrUnavailable)
	}
}

func TestUnavailableIs503(t *testing.T) {
	s, c := newSim(t, sim.Options{})
	_, err := c.Charge(providertest.Context(t, 5*time.Second), providertest.ChargeRequest("k", sim.MethodUnavailable))
	providertest.WantOnly(t, "Charge", err, provider.ErrUnavailable)
	if n := len(s.Charges()); n != 0 {
		t.Errorf("%d charges, want 0", n)
	}
	_, err = c.Lookup(providertest.Context(t, 5*time.Second), providertest.ChargeLookup("k"))
	providertest.WantOnly(t, "Lookup after 503", err, provider.ErrNotFound)
}

func TestServerErrorsAreUnknownOutcome(t *testing.T) {
	for _, status := range []int{http.StatusInternalServerError, http.StatusBadGateway, http.StatusGatewayTimeout, http.StatusCreated, http.StatusFound} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			c := fakeProvider(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(status)
				_, _ = w.Write([]byte(`{"error":"boom"}`))
			})
			for _, call := range providertest.Calls(c, "k", "ch_1") {
				providertest.WantOnly(t, call.Name, call.Do(providertest.Context(t, 5*time.Second)), provider.ErrUnknownOutcome)
			}
		})
	}
}

func TestMalformedSuccessIsUnknownOutcome(t *testing.T) {
	for name, body := range map[string]string{
		"not json":       `<html>ok</html>`,
		"truncated":      `{"id":"ch_1","idempotencyKey":"k","status":"succ`,
		"no id":          `{"idempotencyKey":"k","status":"succeeded"}`,
		"unknown status": `{"id":"ch_1","idempotencyKey":"k","status":"pending"}`,
		"other key":      `{"id":"ch_1","idempotencyKey":"other","status":"succeeded","chargeId":"ch_1"}`,
		// For refunds only; a charge has no chargeId.
		"refund of another charge": `{"id":"re_1","idempotencyKey":"k","status":"succeeded","chargeId":"ch_2"}`,
		"refund without a charge":  `{"id":"re_1","idempotencyKey":"k","status":"succeeded"}`,
	} {
		t.Run(name, func(t *testing.T) {
			c := fakeProvider(t, func(w http.ResponseWriter, r *http.Request) {
				_, _ = w.Write([]byte(body))
			})
			for _, call := range providertest.Calls(c, "k", "ch_1") {
				if strings.HasPrefix(name, "refund") && !strings.Contains(call.Name, "Refund") {
					continue
				}
				// A read by id has no key to compare (TestMalformedCaptureAnswersAreUnknownOutcome).
				if name == "other key" && call.Name == "GetCharge" {
					continue
				}
				providertest.WantOnly(t, call.Name, call.Do(providertest.Context(t, 5*time.Second)), provider.ErrUnknownOutcome)
			}
		})
	}
}

func TestKeyReusedIsAPlainError(t *testing.T) {
	s, c := newSim(t, sim.Options{})
	ctx := providertest.Context(t, 5*time.Second)
	if _, err := c.Charge(ctx, providertest.ChargeRequest("k", sim.MethodVisa)); err != nil {
		t.Fatal(err)
	}
	other := providertest.ChargeRequest("k", sim.MethodVisa)
	other.AmountMinor = 999
	_, err := c.Charge(ctx, other)
	providertest.WantOnly(t, "Charge", err, nil)
	var apiErr *simclient.APIError
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusUnprocessableEntity || apiErr.Code != sim.CodeKeyReused {
		t.Errorf("err = %#v, want an *APIError 422 %s", err, sim.CodeKeyReused)
	}
	if !strings.Contains(err.Error(), sim.CodeKeyReused) {
		t.Errorf("err = %q, want it to name the code", err)
	}
	if n := len(s.Charges()); n != 1 {
		t.Errorf("%d charges, want 1", n)
	}
}

func TestInvalidRequestIsAPlainError(t *testing.T) {
	_, c := newSim(t, sim.Options{})
	req := providertest.ChargeRequest("k", sim.MethodVisa)
	req.Currency = "XXX"
	_, err := c.Charge(providertest.Context(t, 5*time.Second), req)
	providertest.WantOnly(t, "Charge", err, nil)
	var apiErr *simclient.APIError
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest || apiErr.Code != sim.CodeInvalidRequest {
		t.Errorf("err = %#v, want an *APIError 400 %s", err, sim.CodeInvalidRequest)
	}
	_, err = c.Charge(providertest.Context(t, 5*time.Second), providertest.ChargeRequest("", sim.MethodVisa))
	providertest.WantOnly(t, "Charge without key", err, nil)
	_, err = c.Lookup(providertest.Context(t, 5*time.Second), providertest.ChargeLookup(""))
	providertest.WantOnly(t, "Lookup without key", err, nil)
}

func TestLookupNotFound(t *testing.T) {
	_, c := newSim(t, sim.Options{})
	_, err := c.Lookup(providertest.Context(t, 5*time.Second), providertest.ChargeLookup("never seen"))
	providertest.WantOnly(t, "Lookup", err, provider.ErrNotFound)
}

func TestLookupForeign404IsNotNotFound(t *testing.T) {
	c := fakeProvider(t, http.NotFound) // a wrong base URL, say
	for _, call := range providertest.Calls(c, "k", "ch_1") {
		err := call.Do(providertest.Context(t, 5*time.Second))
		providertest.WantOnly(t, call.Name, err, nil)
		var apiErr *simclient.APIError
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound {
			t.Errorf("%s: err = %#v, want an *APIError 404", call.Name, err)
		}
	}
}

func TestLookupFlaky(t *testing.T) {
	_, c := newSim(t, sim.Options{FlakyLookups: 2})
	ctx := providertest.Context(t, 5*time.Second)
	created, err := c.Charge(ctx, providertest.ChargeRequest("k", sim.MethodLookupFlaky))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		_, err := c.Lookup(ctx, providertest.ChargeLookup("k"))
		providertest.WantOnly(t, "flaky Lookup", err, provider.ErrUnavailable)
		if errors.Is(err, provider.ErrNotFound) {
			t.Fatalf("lookup %d: a flaky lookup must never say not found", i+1)
		}
	}
	got, err := c.Lookup(ctx, providertest.ChargeLookup("k"))
	if err != nil || got != created {
		t.Errorf("third Lookup = %+v, %v; want %+v", got, err, created)
	}
}

func TestTimeoutIsNeverNotFound(t *testing.T) {
	c := fakeProvider(t, func(w http.ResponseWriter, r *http.Request) {
		// Only once the body is read does the server notice the client
		// going away.
		_, _ = io.Copy(io.Discard, r.Body)
		<-r.Context().Done()
	})
	for _, call := range providertest.Calls(c, "k", "ch_1") {
		err := call.Do(providertest.Context(t, 50*time.Millisecond))
		providertest.WantOnly(t, call.Name, err, provider.ErrUnknownOutcome)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: err = %v, want context.DeadlineExceeded kept", call.Name, err)
		}
	}
}

func TestLookupEscapesTheKey(t *testing.T) {
	_, c := newSim(t, sim.Options{})
	ctx := providertest.Context(t, 5*time.Second)
	const key = "pay_1/attempt 1&idempotencyKey=other#x?"
	created, err := c.Charge(ctx, providertest.ChargeRequest(key, sim.MethodMastercard))
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Lookup(ctx, providertest.ChargeLookup(key))
	if err != nil || got != created {
		t.Errorf("Lookup = %+v, %v; want %+v", got, err, created)
	}
}

func TestAgainstStartedServer(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := sim.Start(ctx, "127.0.0.1:0", sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := simclient.New(srv.URL(), nil)
	if _, err := c.Charge(providertest.Context(t, 5*time.Second), providertest.ChargeRequest("k", sim.MethodVisa)); err != nil {
		t.Fatal(err)
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	// A client that never connected is refused at the dial: never sent.
	// (One whose kept-alive connection died may have written the request
	// before the dial that failed: see TestTransportErrorAfterAConnection.)
	_, err = simclient.New(srv.URL(), &http.Client{Transport: &http.Transport{}}).Charge(providertest.Context(t, 5*time.Second), providertest.ChargeRequest("k3", sim.MethodVisa))
	providertest.WantOnly(t, "Charge with a fresh client after Close", err, provider.ErrUnavailable)
}

// The simulator's lookups read what its creates wrote: LookupLag is zero,
// and a lookup right after a create finds it, whatever NotBefore says (the
// simulator looks up by key alone).
func TestLookupIsReadAfterWrite(t *testing.T) {
	_, c := newSim(t, sim.Options{})
	if lag := c.LookupLag(); lag != 0 {
		t.Errorf("LookupLag = %v, want 0", lag)
	}
	ctx := providertest.Context(t, 5*time.Second)
	created, err := c.Charge(ctx, providertest.ChargeRequest("k", "pm_card_visa"))
	if err != nil {
		t.Fatal(err)
	}
	for _, notBefore := range []time.Time{{}, time.Now().Add(time.Hour)} {
		got, err := c.Lookup(ctx, provider.ChargeLookup{IdempotencyKey: "k", NotBefore: notBefore})
		if err != nil || got != created {
			t.Errorf("Lookup with NotBefore %v = %+v, %v; want %+v", notBefore, got, err, created)
		}
	}
}
