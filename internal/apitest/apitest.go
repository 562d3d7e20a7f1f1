// Package apitest starts the real payments API in-process for the tests of
// its clients (package client, cmd/paymentsctl): the service of
// internal/servicetest on the system clock, with production's webhook
// policy unless a test asks for dev mode's. A test package that uses it
// runs its tests through pgtest:
//
//	func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
package apitest

import (
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/app"
	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/outbound"
	"github.com/paymentsapi/paymentsapi/internal/provider/sim"
	"github.com/paymentsapi/paymentsapi/internal/servicetest"
)

// Secret is the API key of the tenant a Server's tests use.
const Secret = servicetest.SecretA

// Options change the server's timing; zero fields take the defaults.
type Options struct {
	// ProviderTimeout bounds one provider call (PROVIDER_TIMEOUT). Default
	// 5 s; shorten it to get a 202 from pm_sim_timeout_after_success fast.
	ProviderTimeout time.Duration
	// SlowDelay is how long pm_sim_slow takes. Default 500 ms.
	SlowDelay time.Duration
	// RetryAfter is the Retry-After of 202 and 409 answers. Default 1 s.
	RetryAfter time.Duration
	// Webhooks is where merchants' webhook endpoints may point. The zero
	// value is production's: https only, public addresses only; a test
	// that registers a receiver on 127.0.0.1 sets AllowHTTP and
	// AllowPrivate, as dev mode does.
	Webhooks outbound.Policy
}

// Server is the API started for one test.
type Server struct {
	// URL is the API's base URL.
	URL string
	// Secret is the tenant's API key.
	Secret string
	// Sim is the provider simulator behind the API: its Charges tell how
	// often money moved.
	Sim *sim.Simulator
}

// Start starts the API for t on a database of its own; everything stops
// when t ends.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	if opts.ProviderTimeout <= 0 {
		opts.ProviderTimeout = 5 * time.Second
	}
	if opts.SlowDelay <= 0 {
		opts.SlowDelay = 500 * time.Millisecond
	}
	if opts.RetryAfter <= 0 {
		opts.RetryAfter = time.Second
	}
	e := servicetest.New(t, servicetest.WithClock(clock.System{}), func(o *servicetest.Options) {
		o.Sim.SlowDelay = opts.SlowDelay
		o.Sim.HangFor = opts.ProviderTimeout + time.Second
	}, servicetest.WithConfig(func(c *app.Config) {
		c.Lease = opts.ProviderTimeout + 30*time.Second
		c.ProviderTimeout = opts.ProviderTimeout
		c.RetryAfter = opts.RetryAfter
		c.Webhooks.Policy = opts.Webhooks
	}))
	return &Server{URL: e.URL, Secret: Secret, Sim: e.Sim}
}

// Charges returns the simulator's charges for a payment: the ones whose
// request named it.
func (s *Server) Charges(paymentID string) []sim.ChargeRecord {
	var out []sim.ChargeRecord
	for _, c := range s.Sim.Charges() {
		if c.PaymentID == paymentID {
			out = append(out, c)
		}
	}
	return out
}
