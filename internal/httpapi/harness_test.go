package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/paymentsapi/paymentsapi/internal/apikeys"
	"github.com/paymentsapi/paymentsapi/internal/app"
	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/database"
	"github.com/paymentsapi/paymentsapi/internal/endpoints"
	"github.com/paymentsapi/paymentsapi/internal/httpapi"
	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/metrics"
	"github.com/paymentsapi/paymentsapi/internal/outbound"
	"github.com/paymentsapi/paymentsapi/internal/payments"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
	"github.com/paymentsapi/paymentsapi/internal/provider"
	"github.com/paymentsapi/paymentsapi/internal/provider/sim"
	"github.com/paymentsapi/paymentsapi/internal/provider/simclient"
	"github.com/paymentsapi/paymentsapi/internal/secretbox"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// The secrets of the two tenants every test environment has.
const (
	secretA = "sk_test_tenant_a"
	secretB = "sk_test_tenant_b"
)

// env is the whole API on a real PostgreSQL database of its own and a real
// provider simulator on a loopback port.
type env struct {
	t     testing.TB
	url   string
	pool  *pgxpool.Pool
	sim   *sim.Simulator
	prov  provider.Provider
	clock *clock.Fake
	reg   *prometheus.Registry
	cfg   app.Config
	core  *app.Core // the first instance's
	limit httpapi.RateLimit
	deps  func(*httpapi.Deps) // nil: the HTTP API's dependencies as startInstance makes them
}

type envOption func(*envOptions)

type envOptions struct {
	sim      sim.Options
	cfg      app.Config
	provider func(provider.Provider) provider.Provider
	limit    httpapi.RateLimit
	pool     func(testing.TB) *pgxpool.Pool // nil: pgtest.NewPool
	deps     func(*httpapi.Deps)
	dialSim  bool // the simulator's client reads what it takes (withSimRules)
}

// withDeps changes the HTTP API's dependencies of every instance (its
// operators, its trusted proxies, its logger).
func withDeps(change func(*httpapi.Deps)) envOption {
	return func(o *envOptions) { o.deps = change }
}

func withSlowDelay(d time.Duration) envOption {
	return func(o *envOptions) { o.sim.SlowDelay = d }
}

// withCommitMode sets the engine's committer, for a test of one of them
// (the others run with TEST_COMMIT_MODE's).
func withCommitMode(mode string) envOption {
	return func(o *envOptions) { o.cfg.CommitMode = mode }
}

func withProviderTimeout(d time.Duration) envOption {
	return func(o *envOptions) { o.cfg.ProviderTimeout = d }
}

// withHooks installs failpoints at the boundaries of the state machine.
func withHooks(h payments.Hooks) envOption {
	return func(o *envOptions) { o.cfg.PaymentHooks = h }
}

// withRecovery sets the reconciler's policy.
func withRecovery(p idempotency.RecoveryPolicy) envOption {
	return func(o *envOptions) { o.cfg.Recovery = p }
}

// withRateLimit limits each tenant to perSecond requests with burst (on the
// environment's clock, as the whole server).
func withRateLimit(perSecond float64, burst int) envOption {
	return func(o *envOptions) { o.limit = httpapi.RateLimit{PerSecond: perSecond, Burst: burst} }
}

// withPool makes the environment's database with newPool (a schema of an
// older release: pgtest.NewPoolAt).
func withPool(newPool func(testing.TB) *pgxpool.Pool) envOption {
	return func(o *envOptions) { o.pool = newPool }
}

// withProvider wraps the simulator's client, to inject faults.
func withProvider(wrap func(provider.Provider) provider.Provider) envOption {
	return func(o *envOptions) { o.provider = wrap }
}

// newSecretsBox is a box of webhook secrets under a new random key.
func newSecretsBox(t testing.TB) *secretbox.Box {
	t.Helper()
	key, err := secretbox.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	box, err := secretbox.FromKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return box
}

func newEnv(t testing.TB, opts ...envOption) *env {
	t.Helper()
	o := envOptions{
		sim: sim.Options{SlowDelay: 500 * time.Millisecond, HangFor: 5 * time.Second},
		cfg: app.Config{
			ReplayTTL: 24 * time.Hour, Lease: 30 * time.Second, ProviderTimeout: 5 * time.Second,
			ProviderKeyWindow: 24 * time.Hour, RetryAfter: time.Second, CommitMode: pgtest.CommitMode(),
			// Webhook endpoints as in dev mode: any destination, and a
			// secrets key of the test's own.
			Webhooks: endpoints.Options{Policy: outbound.Policy{AllowHTTP: true, AllowPrivate: true}, Secrets: newSecretsBox(t)},
		},
	}
	for _, opt := range opts {
		opt(&o)
	}
	ctx := context.Background()
	newPool := pgtest.NewPool
	if o.pool != nil {
		newPool = o.pool
	}
	pool := newPool(t)
	if _, err := apikeys.Add(ctx, pool, apikeys.Hasher{}, []apikeys.Pair{{Tenant: "tenant_a", Secret: secretA}, {Tenant: "tenant_b", Secret: secretB}}, time.Now()); err != nil {
		t.Fatal(err)
	}
	simSrv, err := sim.Start(ctx, "127.0.0.1:0", o.sim)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = simSrv.Close() })
	var prov provider.Provider = simclient.New(simSrv.URL(), nil)
	if o.dialSim {
		prov = dialSim(t, simSrv.URL())
	}
	if o.provider != nil {
		prov = o.provider(prov)
	}
	e := &env{t: t, pool: pool, sim: simSrv.Simulator(), prov: prov, cfg: o.cfg, limit: o.limit, deps: o.deps,
		clock: clock.NewFake(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC))}
	e.url, e.core, e.reg = e.instance()
	return e
}

// instance starts one more API instance on the environment's database,
// provider and clock, with its own LISTEN connection, as a second process
// would have. It returns the instance's URL, core and metrics registry.
func (e *env) instance() (string, *app.Core, *prometheus.Registry) {
	return startInstanceWith(e.t, e.pool, e.prov, e.clock, e.cfg, e.limit, e.deps)
}

// startInstance starts an API instance on pool, as cmd/paymentsapi wires
// it, with its own LISTEN connection, metrics and HTTP server, all stopped
// when t ends; not its background workers (reconciler, relay, clean-up). It
// returns the instance's URL, core and metrics registry.
func startInstance(t testing.TB, pool *pgxpool.Pool, prov provider.Provider, clk clock.Clock, cfg app.Config, limit httpapi.RateLimit) (string, *app.Core, *prometheus.Registry) {
	return startInstanceWith(t, pool, prov, clk, cfg, limit, nil)
}

// startInstanceWith is startInstance with the HTTP API's dependencies
// changed by change (nil: none).
func startInstanceWith(t testing.TB, pool *pgxpool.Pool, prov provider.Provider, clk clock.Clock, cfg app.Config, limit httpapi.RateLimit,
	change func(*httpapi.Deps)) (string, *app.Core, *prometheus.Registry) {
	ctx, cancel := context.WithCancel(context.Background())
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	log := testLogger()
	app.RegisterGauges(reg, pool, clk, log)
	keys := idempotency.NewListener(pool.Config().ConnConfig.Copy(), log)
	done := make(chan struct{})
	go func() { defer close(done); keys.Run(ctx) }()
	core := app.New(app.Deps{DB: pool, Provider: prov, Clock: clk, Log: log, Metrics: m, Waiter: keys}, cfg)
	deps := httpapi.Deps{
		DB: pool, Log: log, Metrics: m, Gatherer: reg, OpenAPI: []byte("openapi: 3.1.0\n"),
		Ready:     func(ctx context.Context) error { return database.Ready(ctx, pool) },
		RateLimit: limit, Clock: clk,
	}
	if change != nil {
		change(&deps)
	}
	srv := httptest.NewServer(httpapi.NewServer(core.HTTPDeps(deps)))
	t.Cleanup(func() {
		srv.Close()
		cancel()
		<-done
	})
	return srv.URL, core, reg
}

// deadStoreURL starts an instance whose payments store and readiness check
// see a database that never answers (nothing listens on port 1); with
// authToo its authentication does as well, else authentication works.
func (e *env) deadStoreURL(authToo bool) string {
	e.t.Helper()
	dead, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none?connect_timeout=2&sslmode=disable")
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(dead.Close)
	auth := e.pool
	if authToo {
		auth = dead
	}
	log := testLogger()
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	core := app.New(app.Deps{DB: dead, Provider: e.prov, Clock: e.clock, Log: log, Metrics: m}, e.cfg)
	srv := httptest.NewServer(httpapi.NewServer(core.HTTPDeps(httpapi.Deps{
		DB: auth, Log: log, Metrics: m, Gatherer: reg,
		Ready: func(ctx context.Context) error { return database.Ready(ctx, dead) },
	})))
	e.t.Cleanup(srv.Close)
	return srv.URL
}

// testLogger discards the service's logs, unless TEST_LOG=1 asks for them
// on stderr (to see why a test got a 500).
func testLogger() *slog.Logger {
	if os.Getenv("TEST_LOG") == "1" {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// response is an HTTP answer, read whole.
type response struct {
	Status int
	Header http.Header
	Body   []byte
}

func (r response) json(t testing.TB) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal(r.Body, &v); err != nil {
		t.Fatalf("body is not a JSON object: %v: %s", err, r.Body)
	}
	return v
}

func (e *env) do(method, path string, body []byte, header map[string]string) response {
	e.t.Helper()
	req, err := http.NewRequest(method, e.url+path, bytes.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return response{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// post sends POST /payments as tenant A.
func (e *env) post(key, body string) response {
	e.t.Helper()
	return e.postAs(secretA, key, body)
}

func (e *env) postAs(secret, key, body string) response {
	e.t.Helper()
	return e.do("POST", "/payments", []byte(body), map[string]string{
		"Authorization": "Bearer " + secret, "Idempotency-Key": key, "Content-Type": "application/json",
	})
}

func (e *env) get(secret, path string) response {
	e.t.Helper()
	return e.do("GET", path, nil, map[string]string{"Authorization": "Bearer " + secret})
}

// count returns the number of rows of a table (or any FROM clause).
func (e *env) count(from string, args ...any) int {
	e.t.Helper()
	var n int
	if err := e.pool.QueryRow(context.Background(), "SELECT count(*) FROM "+from, args...).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

// charges returns the simulator's charges for a payment's derived key.
func (e *env) chargesFor(paymentID string) []sim.ChargeRecord {
	var out []sim.ChargeRecord
	for _, c := range e.sim.Charges() {
		if c.IdempotencyKey == payments.ProviderKey(paymentID) {
			out = append(out, c)
		}
	}
	return out
}

// metric returns the value of a counter or the sample count of a histogram
// whose labels include all of labels.
func (e *env) metric(name string, labels map[string]string) float64 {
	e.t.Helper()
	families, err := e.reg.Gather()
	if err != nil {
		e.t.Fatal(err)
	}
	var total float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			for k, v := range labels {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == k && lp.GetValue() == v {
						found = true
					}
				}
				if !found {
					continue next
				}
			}
			switch {
			case m.Counter != nil:
				total += m.GetCounter().GetValue()
			case m.Gauge != nil:
				total += m.GetGauge().GetValue()
			case m.Histogram != nil:
				total += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return total
}

// body builds a create request body from the default one, with overrides.
func body(overrides ...string) string {
	fields := map[string]string{
		"accountId": `"acc_1"`, "amount": `"10.00"`, "currency": `"EUR"`,
		"merchantReference": `"invoice-7781"`, "paymentMethod": `"pm_card_visa"`,
	}
	for i := 0; i+1 < len(overrides); i += 2 {
		if overrides[i+1] == "" {
			delete(fields, overrides[i])
			continue
		}
		fields[overrides[i]] = overrides[i+1]
	}
	parts := make([]string, 0, len(fields))
	for _, k := range []string{"accountId", "amount", "currency", "merchantReference", "paymentMethod", "channel", "description", "extra"} {
		if v, ok := fields[k]; ok {
			parts = append(parts, `"`+k+`":`+v)
		}
	}
	return "{" + strings.Join(parts, ",") + "}"
}
