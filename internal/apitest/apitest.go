// Package apitest starts the real payments API in-process for the tests of
// its clients (package client, cmd/paymentsctl): a fresh PostgreSQL
// database, an API key, the provider simulator on a loopback port, the
// payments service and the HTTP server, as cmd/paymentsapi wires them.
//
// All the wiring of the core is in this one file, so that a change of the
// core's constructors is adapted here once. A test package that uses it
// runs its tests through pgtest:
//
//	func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
package apitest

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/paymentsapi/paymentsapi/api"
	"github.com/paymentsapi/paymentsapi/internal/apikeys"
	"github.com/paymentsapi/paymentsapi/internal/app"
	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/database"
	"github.com/paymentsapi/paymentsapi/internal/endpoints"
	"github.com/paymentsapi/paymentsapi/internal/httpapi"
	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/metrics"
	"github.com/paymentsapi/paymentsapi/internal/outbound"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
	"github.com/paymentsapi/paymentsapi/internal/provider/sim"
	"github.com/paymentsapi/paymentsapi/internal/provider/simclient"
	"github.com/paymentsapi/paymentsapi/internal/secretbox"
)

// Secret is the API key of the one tenant of a Server.
const Secret = "sk_test_apitest"

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
	ctx, cancel := context.WithCancel(context.Background())
	pool := pgtest.NewPool(t)
	clk := clock.System{}
	if _, err := apikeys.Add(ctx, pool, apikeys.Hasher{}, []apikeys.Pair{{Tenant: "apitest", Secret: Secret}}, clk.Now()); err != nil {
		t.Fatalf("apitest: %v", err)
	}
	simSrv, err := sim.Start(ctx, "127.0.0.1:0", sim.Options{SlowDelay: opts.SlowDelay, HangFor: opts.ProviderTimeout + time.Second})
	if err != nil {
		t.Fatalf("apitest: start the provider simulator: %v", err)
	}
	secretsKey, err := secretbox.NewKey()
	if err != nil {
		t.Fatalf("apitest: %v", err)
	}
	secrets, err := secretbox.FromKey(secretsKey)
	if err != nil {
		t.Fatalf("apitest: %v", err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	keys := idempotency.NewListener(pool.Config().ConnConfig.Copy(), log)
	done := make(chan struct{})
	go func() { defer close(done); keys.Run(ctx) }()
	core := app.New(app.Deps{
		DB: pool, Provider: simclient.New(simSrv.URL(), nil), Clock: clk, Log: log, Metrics: m, Waiter: keys,
	}, app.Config{
		ReplayTTL: 24 * time.Hour, Lease: opts.ProviderTimeout + 30*time.Second, ProviderTimeout: opts.ProviderTimeout,
		ProviderKeyWindow: 24 * time.Hour, RetryAfter: opts.RetryAfter,
		Webhooks: endpoints.Options{Policy: opts.Webhooks, Secrets: secrets},
	})
	srv := httptest.NewServer(httpapi.NewServer(core.HTTPDeps(httpapi.Deps{
		DB: pool, Log: log, Metrics: m, Gatherer: reg, OpenAPI: api.OpenAPI,
		Ready: func(ctx context.Context) error { return database.Ready(ctx, pool) },
	})))
	t.Cleanup(func() {
		srv.Close()
		cancel()
		<-done
		_ = simSrv.Close()
	})
	return &Server{URL: srv.URL, Secret: Secret, Sim: simSrv.Simulator()}
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
