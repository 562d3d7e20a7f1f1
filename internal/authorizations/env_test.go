package authorizations_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/paymentsapi/paymentsapi/internal/apikeys"
	"github.com/paymentsapi/paymentsapi/internal/app"
	"github.com/paymentsapi/paymentsapi/internal/authorizations"
	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/database"
	"github.com/paymentsapi/paymentsapi/internal/httpapi"
	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/metrics"
	"github.com/paymentsapi/paymentsapi/internal/payments"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
	"github.com/paymentsapi/paymentsapi/internal/provider"
	"github.com/paymentsapi/paymentsapi/internal/provider/sim"
	"github.com/paymentsapi/paymentsapi/internal/provider/simclient"
	"github.com/paymentsapi/paymentsapi/internal/setting"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

const (
	secret      = "sk_test_authorizations"
	otherSecret = "sk_test_other_tenant"
	replayTTL   = 24 * time.Hour
	authTTL     = 7 * 24 * time.Hour
)

// env is the real HTTP API, as cmd/paymentsapi wires it, on a database of
// its own, with the provider simulator behind it and a clock the test moves.
// instances > 1 starts more API instances on the same database and
// simulator, each with its own pool, engine and reconciler, as separate
// processes would run.
type env struct {
	t      *testing.T
	urls   []string
	pool   *pgxpool.Pool
	clk    *clock.Fake
	sim    *sim.Simulator
	simURL string
	cores  []*app.Core
}

type envOptions struct {
	instances       int
	providerTimeout time.Duration
	hooks           payments.Hooks
	// wrap, if set, wraps the provider each instance calls.
	wrap func(provider.Provider) provider.Provider
}

// lease is the instances' LEASE_DURATION.
func lease(opts envOptions) time.Duration { return opts.providerTimeout + 10*time.Second }

func newEnv(t *testing.T, opts envOptions) *env {
	t.Helper()
	if opts.instances <= 0 {
		opts.instances = 1
	}
	if opts.providerTimeout <= 0 {
		opts.providerTimeout = 2 * time.Second
	}
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	clk := clock.NewFake(time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC))
	if _, err := apikeys.Add(ctx, pool, apikeys.Hasher{}, []apikeys.Pair{{Tenant: "tenant_a", Secret: secret}, {Tenant: "tenant_b", Secret: otherSecret}}, clk.Now()); err != nil {
		t.Fatal(err)
	}
	simulator := sim.New(sim.Options{HangFor: opts.providerTimeout + time.Second, Clock: clk})
	simSrv := httptest.NewServer(simulator)
	t.Cleanup(simSrv.Close)
	e := &env{t: t, pool: pool, clk: clk, sim: simulator, simURL: simSrv.URL}
	for range opts.instances {
		instPool := pool
		if opts.instances > 1 {
			cfg := pool.Config().Copy()
			p, err := pgxpool.NewWithConfig(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(p.Close)
			instPool = p
		}
		reg := prometheus.NewRegistry()
		m := metrics.New(reg)
		log := slog.New(slog.DiscardHandler)
		if os.Getenv("TEST_LOG") != "" {
			log = slog.New(slog.NewTextHandler(os.Stderr, nil))
		}
		keys := idempotency.NewListener(instPool.Config().ConnConfig.Copy(), log)
		listenCtx, stop := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); keys.Run(listenCtx) }()
		t.Cleanup(func() { stop(); <-done })
		var prov provider.Provider = simclient.New(simSrv.URL, nil)
		if opts.wrap != nil {
			prov = opts.wrap(prov)
		}
		core := app.New(app.Deps{DB: instPool, Provider: prov, Clock: clk, Log: log, Metrics: m, Waiter: keys}, app.Config{
			PaymentHooks: opts.hooks, CommitMode: pgtest.CommitMode(),
			ReplayTTL: replayTTL, Lease: lease(opts), RetryAfter: time.Second,
			ProviderTimeout: opts.providerTimeout, ProviderKeyWindow: 24 * time.Hour, Settings: setting.Values{authorizations.SettingTTL: authTTL},
			Recovery: idempotency.RecoveryPolicy{MaxAttempts: 20},
		})
		srv := httptest.NewServer(httpapi.NewServer(core.HTTPDeps(httpapi.Deps{
			DB: instPool, Log: log, Metrics: m, Gatherer: reg, OpenAPI: []byte("openapi: 3.1.0\n"),
			Ready: func(ctx context.Context) error { return database.Ready(ctx, instPool) }, Clock: clk,
		})))
		t.Cleanup(srv.Close)
		e.urls = append(e.urls, srv.URL)
		e.cores = append(e.cores, core)
	}
	return e
}

// response is an HTTP answer, read whole.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) json(t *testing.T) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatalf("body is not a JSON object: %v: %s", err, r.body)
	}
	return v
}

func (r response) String() string { return fmt.Sprintf("%d %s", r.status, r.body) }

// do sends a request to instance i (0 for the first).
func (e *env) do(i int, method, path, key, body string, header ...string) response {
	e.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = bytes.NewReader([]byte(body))
	}
	req, err := http.NewRequest(method, e.urls[i]+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+secret)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for j := 0; j+1 < len(header); j += 2 {
		req.Header.Set(header[j], header[j+1])
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
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

// pay creates a payment of 10.00 EUR with method, manual capture unless
// automatic, and returns its answer.
func (e *env) pay(key, method string, manual bool) response {
	e.t.Helper()
	capture := `,"captureMethod":"manual"`
	if !manual {
		capture = ""
	}
	return e.do(0, "POST", "/payments", key, fmt.Sprintf(
		`{"accountId":"acc_1","amount":"10.00","currency":"EUR","merchantReference":"inv-%s","paymentMethod":%q%s}`,
		key, method, capture))
}

// authorized creates an authorized payment with method and returns its id.
func (e *env) authorized(key, method string) string {
	e.t.Helper()
	r := e.pay(key, method, true)
	if r.status != http.StatusCreated || r.json(e.t)["status"] != "REQUIRES_CAPTURE" {
		e.t.Fatalf("pay manual: %s", r)
	}
	return r.json(e.t)["paymentId"].(string)
}

func (e *env) capture(i int, paymentID, key, body string) response {
	e.t.Helper()
	return e.do(i, "POST", "/payments/"+paymentID+"/capture", key, body)
}

func (e *env) cancel(i int, paymentID, key, body string) response {
	e.t.Helper()
	return e.do(i, "POST", "/payments/"+paymentID+"/cancel", key, body)
}

func (e *env) payment(id string) map[string]any {
	e.t.Helper()
	r := e.do(0, "GET", "/payments/"+id, "", "")
	if r.status != http.StatusOK {
		e.t.Fatalf("GET payment: %s", r)
	}
	return r.json(e.t)
}

// charge is the simulator's charge of payment id.
func (e *env) charge(paymentID string) sim.ChargeRecord {
	e.t.Helper()
	var out []sim.ChargeRecord
	for _, c := range e.sim.Charges() {
		if c.PaymentID == paymentID {
			out = append(out, c)
		}
	}
	if len(out) != 1 {
		e.t.Fatalf("the provider holds %d charges of %s, want 1: %+v", len(out), paymentID, out)
	}
	return out[0]
}

func (e *env) count(from string, args ...any) int {
	e.t.Helper()
	var n int
	if err := e.pool.QueryRow(context.Background(), "SELECT count(*) FROM "+from, args...).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

// reconcile runs every instance's reconciler once.
func (e *env) reconcile() {
	e.t.Helper()
	for _, c := range e.cores {
		if _, err := c.Reconciler.RunOnce(context.Background(), 100); err != nil {
			e.t.Fatal(err)
		}
	}
}

func wantStatus(t *testing.T, r response, status int, code string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("got %s, want %d %s", r, status, code)
	}
	if code != "" {
		if got := r.json(t)["code"]; got != code {
			t.Fatalf("got code %v (%s), want %s", got, r, code)
		}
	}
}
