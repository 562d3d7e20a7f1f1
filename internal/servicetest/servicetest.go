// Package servicetest starts the whole service in-process for a test, as
// cmd/paymentsapi wires it: a fresh PostgreSQL database (internal/pgtest),
// the provider simulator on a loopback port, the app core (internal/app)
// and the HTTP server, on a fake clock the test moves. Every test of an
// operation's behaviour, of the HTTP layer and of the API's clients starts
// from New, so that a change of the core's wiring is adapted here once.
//
// A test package that uses it runs its tests through pgtest:
//
//	func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
package servicetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
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
	"github.com/paymentsapi/paymentsapi/internal/operators"
	"github.com/paymentsapi/paymentsapi/internal/outbound"
	"github.com/paymentsapi/paymentsapi/internal/payments"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
	"github.com/paymentsapi/paymentsapi/internal/provider"
	"github.com/paymentsapi/paymentsapi/internal/provider/sim"
	"github.com/paymentsapi/paymentsapi/internal/provider/simclient"
	"github.com/paymentsapi/paymentsapi/internal/provider/units"
	"github.com/paymentsapi/paymentsapi/internal/secretbox"
)

// The secrets of the two tenants every test environment has.
const (
	SecretA = "sk_test_tenant_a"
	SecretB = "sk_test_tenant_b"
)

// Env is the whole API on a real PostgreSQL database of its own and a real
// provider simulator on a loopback port.
type Env struct {
	T         testing.TB
	URL       string
	Pool      *pgxpool.Pool
	Sim       *sim.Simulator
	SimURL    string // the simulator's base URL (GET /_sim/charges, /_sim/refunds)
	Provider  provider.Provider
	Clock     *clock.Fake // the clock the service reads, unless WithClock gave another
	Registry  *prometheus.Registry
	Config    app.Config
	Core      *app.Core // the first instance's
	RateLimit httpapi.RateLimit
	Wire      Wiring // nil: the HTTP API's dependencies as StartInstance makes them

	clk clock.Clock // what the instances read: Clock, or the one WithClock gave
	// first is the first instance's listener, bound before the service is
	// made so that PublicURL can name it.
	first net.Listener
}

// An Option changes how New starts the environment.
type Option func(*Options)

// Options are what an Option changes; a test package writes its own
// options on them (a scripted provider, a hook, a policy).
type Options struct {
	Sim      sim.Options
	Config   app.Config
	Provider func(provider.Provider) provider.Provider
	Limit    httpapi.RateLimit
	Pool     func(testing.TB) *pgxpool.Pool // nil: pgtest.NewPool
	Wire     Wiring
	DialSim  bool        // the simulator's client reads what it takes (simclient.Dial)
	Clock    clock.Clock // nil: a fake clock, Env.Clock
	// SimOnClock makes the simulator read the environment's fake clock,
	// so that its authorizations expire and its keys age as the test
	// moves time.
	SimOnClock bool
}

// Instance is what one API instance was started with, for a Wiring.
type Instance struct {
	Pool     *pgxpool.Pool
	Core     *app.Core
	Registry *prometheus.Registry
	Provider provider.Provider
	Clock    clock.Clock
	Log      *slog.Logger
}

// A Wiring changes an instance's HTTP dependencies once its core is made:
// its operators, its trusted proxies, the dashboard on its core.
type Wiring func(d *httpapi.Deps, in Instance)

// then is w followed by next.
func (w Wiring) then(next Wiring) Wiring {
	if w == nil {
		return next
	}
	return func(d *httpapi.Deps, in Instance) { w(d, in); next(d, in) }
}

// WithConfig changes the core's configuration.
func WithConfig(change func(*app.Config)) Option {
	return func(o *Options) { change(&o.Config) }
}

// WithClock makes the service read clk instead of the environment's fake
// clock (clock.System{} for a test of a client that waits in real time).
func WithClock(clk clock.Clock) Option {
	return func(o *Options) { o.Clock = clk }
}

// WithDeps changes the HTTP API's dependencies of every instance (its
// operators, its trusted proxies, its logger), after the changes of the
// options before it.
func WithDeps(change func(*httpapi.Deps)) Option {
	return WithWiring(func(d *httpapi.Deps, _ Instance) { change(d) })
}

// WithWiring is WithDeps for a change that needs the instance: its core
// (to mount the dashboard), its metrics, its clock.
func WithWiring(w Wiring) Option {
	return func(o *Options) { o.Wire = o.Wire.then(w) }
}

// WithSimOnTheClock makes the simulator read the environment's fake clock.
func WithSimOnTheClock() Option {
	return func(o *Options) { o.SimOnClock = true }
}

func WithSlowDelay(d time.Duration) Option {
	return func(o *Options) { o.Sim.SlowDelay = d }
}

// WithCommitMode sets the engine's committer, for a test of one of them
// (the others run with TEST_COMMIT_MODE's).
func WithCommitMode(mode string) Option {
	return func(o *Options) { o.Config.CommitMode = mode }
}

func WithProviderTimeout(d time.Duration) Option {
	return func(o *Options) { o.Config.ProviderTimeout = d }
}

// WithHooks installs failpoints at the boundaries of the state machine.
func WithHooks(h payments.Hooks) Option {
	return func(o *Options) { o.Config.PaymentHooks = h }
}

// WithRecovery sets the reconciler's policy.
func WithRecovery(p idempotency.RecoveryPolicy) Option {
	return func(o *Options) { o.Config.Recovery = p }
}

// WithRateLimit limits each tenant to perSecond requests with burst (on the
// environment's clock, as the whole server).
func WithRateLimit(perSecond float64, burst int) Option {
	return func(o *Options) { o.Limit = httpapi.RateLimit{PerSecond: perSecond, Burst: burst} }
}

// WithPool makes the environment's database with newPool (a schema of an
// older release: pgtest.NewPoolAt).
func WithPool(newPool func(testing.TB) *pgxpool.Pool) Option {
	return func(o *Options) { o.Pool = newPool }
}

// WithProvider wraps the simulator's client, to inject faults.
func WithProvider(wrap func(provider.Provider) provider.Provider) Option {
	return func(o *Options) { o.Provider = wrap }
}

// WithSimRules makes the simulator play rules, and its client read them,
// with its test payment methods, as the server does (simclient.Dial).
func WithSimRules(rules units.Rules) Option {
	return func(o *Options) {
		o.Sim.CurrencyRules = rules
		o.DialSim = true
	}
}

// OperatorSecret is the key of the operator WithOperators makes.
const OperatorSecret = "sk_operator_alice_0123456789abcdef"

// WithOperators makes alice an operator (OPERATOR_KEYS), and lets
// webhook endpoints point at loopback over http.
func WithOperators(t testing.TB) Option {
	ops, err := operators.Parse("alice:" + OperatorSecret)
	if err != nil {
		t.Fatal(err)
	}
	return WithDeps(func(d *httpapi.Deps) { d.Operators = ops })
}

// NewSecretsBox is a box of webhook secrets under a new random key.
func NewSecretsBox(t testing.TB) *secretbox.Box {
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

// New starts the service for t, with two tenants (SecretA, SecretB), and
// stops it when t ends.
func New(t testing.TB, opts ...Option) *Env {
	t.Helper()
	o := Options{
		Sim: sim.Options{SlowDelay: 500 * time.Millisecond, HangFor: 5 * time.Second},
		Config: app.Config{
			ReplayTTL: 24 * time.Hour, Lease: 30 * time.Second, ProviderTimeout: 5 * time.Second,
			ProviderKeyWindow: 24 * time.Hour, RetryAfter: time.Second, CommitMode: pgtest.CommitMode(),
			// Webhook endpoints as in dev mode: any destination, and a
			// secrets key of the test's own.
			Webhooks: endpoints.Options{Policy: outbound.Policy{AllowHTTP: true, AllowPrivate: true}, Secrets: NewSecretsBox(t)},
		},
	}
	for _, opt := range opts {
		opt(&o)
	}
	ctx := context.Background()
	newPool := pgtest.NewPool
	if o.Pool != nil {
		newPool = o.Pool
	}
	fake := clock.NewFake(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC))
	var clk clock.Clock = fake
	if o.Clock != nil {
		clk = o.Clock
	}
	if o.SimOnClock {
		o.Sim.Clock = fake
	}
	pool := newPool(t)
	if _, err := apikeys.Add(ctx, pool, apikeys.Hasher{}, []apikeys.Pair{{Tenant: "tenant_a", Secret: SecretA}, {Tenant: "tenant_b", Secret: SecretB}}, clk.Now()); err != nil {
		t.Fatal(err)
	}
	simSrv, err := sim.Start(ctx, "127.0.0.1:0", o.Sim)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = simSrv.Close() })
	var prov provider.Provider = simclient.New(simSrv.URL(), nil)
	if o.DialSim {
		prov = dialSim(t, simSrv.URL())
	}
	if o.Provider != nil {
		prov = o.Provider(prov)
	}
	e := &Env{T: t, Pool: pool, Sim: simSrv.Simulator(), SimURL: simSrv.URL(), Provider: prov, Config: o.Config, RateLimit: o.Limit, Wire: o.Wire,
		Clock: fake, clk: clk}
	if e.Config.PublicURL == "" {
		// Without a PUBLIC_URL of the test's, customers are sent back to
		// the first instance, as the command's default (its own address)
		// does; every instance has the one public URL, as behind a
		// load balancer.
		if e.first, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		e.Config.PublicURL = "http://" + e.first.Addr().String()
	}
	e.URL, e.Core, e.Registry = e.Instance()
	return e
}

// Instance starts one more API instance on the environment's database,
// provider and clock, with its own LISTEN connection, as a second process
// would have. It returns the instance's URL, core and metrics registry.
func (e *Env) Instance() (string, *app.Core, *prometheus.Registry) {
	ln := e.first
	e.first = nil
	return startInstance(e.T, e.Pool, e.Provider, e.clk, e.Config, e.RateLimit, e.Wire, ln)
}

// Process is Instance with a pool of the instance's own, as a separate
// process has: its connections, its prepared statements, its own wait
// for a connection.
func (e *Env) Process() (string, *app.Core, *prometheus.Registry) {
	e.T.Helper()
	pool, err := pgxpool.NewWithConfig(context.Background(), e.Pool.Config().Copy())
	if err != nil {
		e.T.Fatal(err)
	}
	e.T.Cleanup(pool.Close)
	return StartInstanceWith(e.T, pool, e.Provider, e.clk, e.Config, e.RateLimit, e.Wire)
}

// StartInstance starts an API instance on pool, as cmd/paymentsapi wires
// it, with its own LISTEN connection, metrics and HTTP server, all stopped
// when t ends; not its background workers (reconciler, relay, clean-up). It
// returns the instance's URL, core and metrics registry.
func StartInstance(t testing.TB, pool *pgxpool.Pool, prov provider.Provider, clk clock.Clock, cfg app.Config, limit httpapi.RateLimit) (string, *app.Core, *prometheus.Registry) {
	return StartInstanceWith(t, pool, prov, clk, cfg, limit, nil)
}

// StartInstanceWith is StartInstance with the HTTP API's dependencies
// changed by wire (nil: none).
func StartInstanceWith(t testing.TB, pool *pgxpool.Pool, prov provider.Provider, clk clock.Clock, cfg app.Config, limit httpapi.RateLimit,
	wire Wiring) (string, *app.Core, *prometheus.Registry) {
	return startInstance(t, pool, prov, clk, cfg, limit, wire, nil)
}

// startInstance is StartInstanceWith, serving on ln (nil: a new loopback
// listener).
func startInstance(t testing.TB, pool *pgxpool.Pool, prov provider.Provider, clk clock.Clock, cfg app.Config, limit httpapi.RateLimit,
	wire Wiring, ln net.Listener) (string, *app.Core, *prometheus.Registry) {
	ctx, cancel := context.WithCancel(context.Background())
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	log := TestLogger()
	app.RegisterGauges(reg, pool, clk, log)
	keys := idempotency.NewListener(pool.Config().ConnConfig.Copy(), log)
	done := make(chan struct{})
	go func() { defer close(done); keys.Run(ctx) }()
	core := app.New(app.Deps{DB: pool, Provider: prov, Clock: clk, Log: log, Metrics: m, Waiter: keys}, cfg)
	deps := httpapi.Deps{
		DB: pool, Log: log, Metrics: m, Gatherer: reg, OpenAPI: api.OpenAPI,
		Ready:     func(ctx context.Context) error { return database.Ready(ctx, pool) },
		RateLimit: limit, Clock: clk,
	}
	if wire != nil {
		wire(&deps, Instance{Pool: pool, Core: core, Registry: reg, Provider: prov, Clock: clk, Log: log})
	}
	srv := httptest.NewUnstartedServer(httpapi.NewServer(core.HTTPDeps(deps)))
	if ln != nil {
		_ = srv.Listener.Close()
		srv.Listener = ln
	}
	srv.Start()
	t.Cleanup(func() {
		srv.Close()
		cancel()
		<-done
	})
	return srv.URL, core, reg
}

// DeadStoreURL starts an instance whose payments store and readiness check
// see a database that never answers (nothing listens on port 1); with
// authToo its authentication does as well, else authentication works.
func (e *Env) DeadStoreURL(authToo bool) string {
	e.T.Helper()
	dead, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none?connect_timeout=2&sslmode=disable")
	if err != nil {
		e.T.Fatal(err)
	}
	e.T.Cleanup(dead.Close)
	auth := e.Pool
	if authToo {
		auth = dead
	}
	log := TestLogger()
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	core := app.New(app.Deps{DB: dead, Provider: e.Provider, Clock: e.clk, Log: log, Metrics: m}, e.Config)
	srv := httptest.NewServer(httpapi.NewServer(core.HTTPDeps(httpapi.Deps{
		DB: auth, Log: log, Metrics: m, Gatherer: reg,
		Ready: func(ctx context.Context) error { return database.Ready(ctx, dead) },
	})))
	e.T.Cleanup(srv.Close)
	return srv.URL
}

// TestLogger discards the service's logs, unless TEST_LOG=1 asks for them
// on stderr (to see why a test got a 500).
func TestLogger() *slog.Logger {
	if os.Getenv("TEST_LOG") == "1" {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// Response is an HTTP answer, read whole.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

func (r Response) JSON(t testing.TB) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal(r.Body, &v); err != nil {
		t.Fatalf("body is not a JSON object: %v: %s", err, r.Body)
	}
	return v
}

func (e *Env) Do(method, path string, body []byte, header map[string]string) Response {
	e.T.Helper()
	req, err := http.NewRequest(method, e.URL+path, bytes.NewReader(body))
	if err != nil {
		e.T.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.T.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.T.Fatal(err)
	}
	return Response{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// Post sends POST /payments as tenant A.
func (e *Env) Post(key, body string) Response {
	e.T.Helper()
	return e.PostAs(SecretA, key, body)
}

func (e *Env) PostAs(secret, key, body string) Response {
	e.T.Helper()
	return e.Do("POST", "/payments", []byte(body), map[string]string{
		"Authorization": "Bearer " + secret, "Idempotency-Key": key, "Content-Type": "application/json",
	})
}

func (e *Env) Get(secret, path string) Response {
	e.T.Helper()
	return e.Do("GET", path, nil, map[string]string{"Authorization": "Bearer " + secret})
}

// Pay creates a payment of 10.00 EUR with method as tenant A and returns
// its id; it must succeed.
func (e *Env) Pay(method, ref string) string {
	e.T.Helper()
	r := e.Post("pay-"+ref, Body("merchantReference", `"`+ref+`"`, "paymentMethod", `"`+method+`"`))
	if r.Status != http.StatusCreated {
		e.T.Fatalf("payment: %d %s", r.Status, r.Body)
	}
	return r.JSON(e.T)["paymentId"].(string)
}

// RefundAs sends POST /payments/{id}/refunds as secret with key.
func (e *Env) RefundAs(secret, paymentID, key, body string) Response {
	e.T.Helper()
	return e.Do("POST", "/payments/"+paymentID+"/refunds", []byte(body), map[string]string{
		"Authorization": "Bearer " + secret, "Idempotency-Key": key, "Content-Type": "application/json",
	})
}

// Refund sends POST /payments/{id}/refunds as tenant A with key.
func (e *Env) Refund(paymentID, key, body string) Response {
	e.T.Helper()
	return e.RefundAs(SecretA, paymentID, key, body)
}

// ProviderRefunds returns the simulator's refunds of a charge.
func (e *Env) ProviderRefunds(chargeID string) []sim.RefundRecord {
	var out []sim.RefundRecord
	for _, r := range e.Sim.Refunds() {
		if r.ChargeID == chargeID {
			out = append(out, r)
		}
	}
	return out
}

// ChargeOf is the provider's reference of a payment (its charge).
func (e *Env) ChargeOf(paymentID string) string {
	e.T.Helper()
	return e.Get(SecretA, "/payments/"+paymentID).JSON(e.T)["providerReference"].(string)
}

// Reconcile runs one reconciler pass and returns what it did.
func (e *Env) Reconcile() idempotency.RecoveryStats {
	e.T.Helper()
	stats, err := e.Core.Reconciler.RunOnce(context.Background(), 10)
	if err != nil {
		e.T.Fatal(err)
	}
	return stats
}

// ManualBody is the body of a manual payment: authorized only.
func ManualBody(reference, method string) string {
	return strings.TrimSuffix(Body("merchantReference", `"`+reference+`"`, "paymentMethod", `"`+method+`"`), "}") +
		`,"captureMethod":"manual"}`
}

// ManualPayment creates a manual payment as tenant A and returns its id,
// once the provider authorized it.
func (e *Env) ManualPayment(method, reference string) string {
	e.T.Helper()
	r := e.Post("pay-"+reference, ManualBody(reference, method))
	if r.Status != http.StatusCreated || r.JSON(e.T)["status"] != "REQUIRES_CAPTURE" {
		e.T.Fatalf("manual payment: %d %s", r.Status, r.Body)
	}
	return r.JSON(e.T)["paymentId"].(string)
}

// Transition is one audit record of a state machine: the state it moved
// to, who moved it, under which request.
type Transition struct {
	To, Actor, RequestID string
}

// Transitions reads the audit records of row id in table (keyed by
// column), oldest first.
func (e *Env) Transitions(table, column, id string) []Transition {
	e.T.Helper()
	rows, err := e.Pool.Query(context.Background(), `SELECT to_state, coalesce(actor, ''), coalesce(request_id, '')
		FROM `+table+` WHERE `+column+` = $1 ORDER BY id`, id)
	if err != nil {
		e.T.Fatal(err)
	}
	defer rows.Close()
	var out []Transition
	for rows.Next() {
		var tr Transition
		if err := rows.Scan(&tr.To, &tr.Actor, &tr.RequestID); err != nil {
			e.T.Fatal(err)
		}
		out = append(out, tr)
	}
	if err := rows.Err(); err != nil {
		e.T.Fatal(err)
	}
	return out
}

// SecondKey creates another key of tenant A and returns its secret, its id
// and the id of the key of SecretA.
func (e *Env) SecondKey() (secret, id, idA string) {
	e.T.Helper()
	ctx := context.Background()
	k, secret, err := apikeys.Create(ctx, e.Pool, apikeys.Hasher{}, "tenant_a", true, time.Now())
	if err != nil {
		e.T.Fatal(err)
	}
	keys, err := apikeys.List(ctx, e.Pool, "tenant_a")
	if err != nil {
		e.T.Fatal(err)
	}
	for _, o := range keys {
		if o.ID != k.ID {
			idA = o.ID
		}
	}
	return secret, k.ID, idA
}

// Count returns the number of rows of a table (or any FROM clause).
func (e *Env) Count(from string, args ...any) int {
	e.T.Helper()
	var n int
	if err := e.Pool.QueryRow(context.Background(), "SELECT count(*) FROM "+from, args...).Scan(&n); err != nil {
		e.T.Fatal(err)
	}
	return n
}

// ChargesFor returns the simulator's charges for a payment's derived key.
func (e *Env) ChargesFor(paymentID string) []sim.ChargeRecord {
	var out []sim.ChargeRecord
	for _, c := range e.Sim.Charges() {
		if c.IdempotencyKey == payments.ProviderKey(paymentID) {
			out = append(out, c)
		}
	}
	return out
}

// Metric returns the value of a counter or the sample count of a histogram
// whose labels include all of labels.
func (e *Env) Metric(name string, labels map[string]string) float64 {
	e.T.Helper()
	families, err := e.Registry.Gather()
	if err != nil {
		e.T.Fatal(err)
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

// Body builds a create request body from the default one, with overrides.
func Body(overrides ...string) string {
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
	for _, k := range []string{"accountId", "amount", "currency", "merchantReference", "paymentMethod", "channel", "description", "returnUrl", "extra"} {
		if v, ok := fields[k]; ok {
			parts = append(parts, `"`+k+`":`+v)
		}
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// dialSim is the client of the simulator at url that has read what it
// takes.
func dialSim(t testing.TB, url string) *simclient.Client {
	t.Helper()
	c, err := simclient.Dial(context.Background(), url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// ErrCrash is the error of CrashOnce's failpoint.
var ErrCrash = errors.New("injected crash")

// CrashOnce is a failpoint that fails its first call only: the original
// request dies there; the recovery that follows passes through.
func CrashOnce() func(context.Context, string) error {
	var calls atomic.Int32
	return func(context.Context, string) error {
		if calls.Add(1) == 1 {
			return ErrCrash
		}
		return nil
	}
}

// PaymentState returns a payment's state.
func (e *Env) PaymentState(paymentID string) payments.State {
	e.T.Helper()
	var s payments.State
	if err := e.Pool.QueryRow(context.Background(), `SELECT state FROM payments WHERE id = $1`, paymentID).Scan(&s); err != nil {
		e.T.Fatal(err)
	}
	return s
}

// OnlyPaymentID returns the id of the one payment in the database.
func (e *Env) OnlyPaymentID() string {
	e.T.Helper()
	var id string
	if err := e.Pool.QueryRow(context.Background(), `SELECT id FROM payments`).Scan(&id); err != nil {
		e.T.Fatal(err)
	}
	return id
}

// AssertChargedOnce checks that the payment ended SUCCEEDED with exactly one
// charge that the provider was asked to create once, and one success event.
func (e *Env) AssertChargedOnce(paymentID string) {
	e.T.Helper()
	if s := e.PaymentState(paymentID); s != payments.StateCompleted {
		e.T.Errorf("payment %s, want COMPLETED", s)
	}
	charges := e.ChargesFor(paymentID)
	if len(charges) != 1 || charges[0].RequestCount != 1 {
		e.T.Errorf("provider charges %+v: want one, created by one request", charges)
	}
	if n := e.Count(`outbox_events WHERE aggregate_id = $1 AND event_type = 'PaymentSucceeded'`, paymentID); n != 1 {
		e.T.Errorf("PaymentSucceeded events = %d, want 1", n)
	}
	if n := e.Count(`payment_transitions WHERE payment_id = $1 AND to_state = 'COMPLETED'`, paymentID); n != 1 {
		e.T.Errorf("transitions to COMPLETED = %d, want 1", n)
	}
	if n := e.Count("payments"); n != 1 {
		e.T.Errorf("payments = %d, want 1", n)
	}
}

// WaitFor waits up to 10 s, in real time, for cond to hold.
func WaitFor(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Bearer is the header that authenticates as secret.
func Bearer(secret string) map[string]string {
	return map[string]string{"Authorization": "Bearer " + secret}
}

// CreateHeaders are the headers of a create request as secret with key.
func CreateHeaders(secret, key string) map[string]string {
	return map[string]string{"Authorization": "Bearer " + secret, "Idempotency-Key": key, "Content-Type": "application/json"}
}
