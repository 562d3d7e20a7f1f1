// Package providertest is test support for the payment providers: helpers
// that the contract tests of packages sim, simclient and stripeprovider
// share, and conformance cases that every adapter of a port must pass
// (RunCaptures). Only tests import it.
package providertest

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/provider"
	"github.com/paymentsapi/paymentsapi/internal/provider/sim"
)

// ChargeRequest returns a request to charge 10.00 EUR with method for
// payment pay_1 ("order 7"), under the idempotency key key.
func ChargeRequest(key, method string) provider.ChargeRequest {
	return provider.ChargeRequest{
		IdempotencyKey: key,
		AmountMinor:    1000,
		Currency:       "EUR",
		PaymentMethod:  method,
		Description:    "order 7",
		PaymentID:      "pay_1",
	}
}

// AuthorizeRequest returns ChargeRequest(key, method) with CaptureManual:
// an authorization of 10.00 EUR.
func AuthorizeRequest(key, method string) provider.ChargeRequest {
	req := ChargeRequest(key, method)
	req.CaptureManual = true
	return req
}

// CaptureRequest returns a request to capture amount minor units of EUR of
// charge chargeID, for payment pay_1, under the idempotency key key.
func CaptureRequest(key, chargeID string, amount int64) provider.CaptureRequest {
	return provider.CaptureRequest{
		IdempotencyKey: key,
		ChargeID:       chargeID,
		AmountMinor:    amount,
		Currency:       "EUR",
		PaymentID:      "pay_1",
	}
}

// VoidRequest returns a request to void charge chargeID (requested by the
// customer, for payment pay_1), under the idempotency key key.
func VoidRequest(key, chargeID string) provider.VoidRequest {
	return provider.VoidRequest{
		IdempotencyKey: key,
		ChargeID:       chargeID,
		Reason:         "requested_by_customer",
		PaymentID:      "pay_1",
	}
}

// RefundRequest returns a request to refund amount minor units of EUR of
// charge chargeID (requested by the customer, for refund re_1), under the
// idempotency key key.
func RefundRequest(key, chargeID string, amount int64) provider.RefundRequest {
	return provider.RefundRequest{
		IdempotencyKey: key,
		ChargeID:       chargeID,
		AmountMinor:    amount,
		Currency:       "EUR",
		Reason:         "requested_by_customer",
		RefundID:       "re_1",
	}
}

// ChargeLookup returns a lookup of the charge created with key, no earlier
// than an hour ago.
func ChargeLookup(key string) provider.ChargeLookup {
	return provider.ChargeLookup{IdempotencyKey: key, NotBefore: time.Now().Add(-time.Hour)}
}

// Context returns a context that ends after d, or when the test ends.
func Context(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// sentinels lists which of the provider errors err is.
func sentinels(err error) []string {
	var out []string
	for name, s := range map[string]error{
		"ErrUnavailable":    provider.ErrUnavailable,
		"ErrUnknownOutcome": provider.ErrUnknownOutcome,
		"ErrNotFound":       provider.ErrNotFound,
		"ErrAmbiguous":      provider.ErrAmbiguous,
	} {
		if errors.Is(err, s) {
			out = append(out, name)
		}
	}
	return out
}

// WantOnly fails the test unless err is want and none of the other provider
// sentinels (provider.ErrUnavailable, provider.ErrUnknownOutcome,
// provider.ErrNotFound, provider.ErrAmbiguous); a nil want means none of
// them (but an error). what names the call in the failure message.
func WantOnly(t testing.TB, what string, err, want error) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: nil error, want %v", what, want)
	}
	got := sentinels(err)
	switch {
	case want == nil && len(got) != 0:
		t.Fatalf("%s: err = %v is %v, want none of the sentinels", what, err, got)
	case want != nil && (len(got) != 1 || !errors.Is(err, want)):
		t.Fatalf("%s: err = %v is %v, want only %v", what, err, got, want)
	}
}

// ServeSim serves a new sim.Simulator on an httptest server that is closed
// when the test ends. A zero opts.SlowDelay becomes slow and a zero
// opts.HangFor becomes hang, so that tests pass the short delays they are
// written for instead of the simulator's defaults.
func ServeSim(t testing.TB, opts sim.Options, slow, hang time.Duration) (*sim.Simulator, *httptest.Server) {
	t.Helper()
	if opts.SlowDelay == 0 {
		opts.SlowDelay = slow
	}
	if opts.HangFor == 0 {
		opts.HangFor = hang
	}
	s := sim.New(opts)
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return s, ts
}

// Call is one method of a provider.Provider, called with fixed arguments,
// reduced to its error: so that a test of how answers are classified can
// run against every method.
type Call struct {
	Name   string // "Charge", "Lookup", "Refund", "LookupRefund", "Capture", "Void" or "GetCharge"
	Lookup bool   // a read: Lookup, LookupRefund or GetCharge
	Do     func(ctx context.Context) error
}

// Calls returns p's seven methods, called with ChargeRequest(key,
// "pm_card_visa"), ChargeLookup(key), RefundRequest(key, chargeID, 300), a
// RefundLookup of key and chargeID, CaptureRequest(key, chargeID, 800),
// VoidRequest(key, chargeID) and chargeID.
func Calls(p provider.Provider, key, chargeID string) []Call {
	return []Call{
		{"Charge", false, func(ctx context.Context) error {
			_, err := p.Charge(ctx, ChargeRequest(key, "pm_card_visa"))
			return err
		}},
		{"Lookup", true, func(ctx context.Context) error {
			_, err := p.Lookup(ctx, ChargeLookup(key))
			return err
		}},
		{"Refund", false, func(ctx context.Context) error {
			_, err := p.Refund(ctx, RefundRequest(key, chargeID, 300))
			return err
		}},
		{"LookupRefund", true, func(ctx context.Context) error {
			_, err := p.LookupRefund(ctx, provider.RefundLookup{IdempotencyKey: key, ChargeID: chargeID})
			return err
		}},
		{"Capture", false, func(ctx context.Context) error {
			_, err := p.Capture(ctx, CaptureRequest(key, chargeID, 800))
			return err
		}},
		{"Void", false, func(ctx context.Context) error {
			_, err := p.Void(ctx, VoidRequest(key, chargeID))
			return err
		}},
		{"GetCharge", true, func(ctx context.Context) error {
			_, err := p.GetCharge(ctx, chargeID)
			return err
		}},
	}
}

// HangUp takes the connection of the request that w answers away from the
// server and closes it without an answer: with a TCP reset when reset is
// set, else with an orderly close.
func HangUp(t testing.TB, w http.ResponseWriter, reset bool) {
	t.Helper()
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		t.Errorf("hijack: %v", err)
		return
	}
	if tcp, ok := conn.(*net.TCPConn); ok && reset {
		_ = tcp.SetLinger(0)
	}
	conn.Close()
}

// Resender is an http.Handler for tests of what a client makes of net/http
// resending a request: it hangs up on the first copy of each request after
// reading it, without an answer, and serves the second copy, which net/http
// sends on a new connection when the first went out on a kept-alive one and
// carries an Idempotency-Key, with Answer.
type Resender struct {
	Answer http.HandlerFunc
	t      testing.TB
	copies atomic.Int32
}

// NewResender returns a Resender that answers resends with answer.
func NewResender(t testing.TB, answer http.HandlerFunc) *Resender {
	return &Resender{Answer: answer, t: t}
}

// ServeHTTP hangs up on odd copies and answers even ones.
func (rs *Resender) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if rs.copies.Add(1)%2 == 1 {
		HangUp(rs.t, w, false)
		return
	}
	rs.Answer(w, r)
}

// Do runs call, which must send its request to rs over a kept-alive
// connection, and returns its error. It fails the test unless rs saw two
// copies, the request and net/http's resend, since otherwise the test did
// not set up its case.
func (rs *Resender) Do(ctx context.Context, call Call) error {
	rs.t.Helper()
	before := rs.copies.Load()
	err := call.Do(ctx)
	if n := rs.copies.Load() - before; n != 2 {
		rs.t.Fatalf("%s: the server saw %d copies, want the request and net/http's resend (err %v)", call.Name, n, err)
	}
	return err
}
