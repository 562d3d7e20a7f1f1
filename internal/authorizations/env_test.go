package authorizations_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paymentsapi/paymentsapi/internal/app"
	"github.com/paymentsapi/paymentsapi/internal/authorizations"
	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/payments"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
	"github.com/paymentsapi/paymentsapi/internal/provider"
	"github.com/paymentsapi/paymentsapi/internal/provider/sim"
	"github.com/paymentsapi/paymentsapi/internal/servicetest"
	"github.com/paymentsapi/paymentsapi/internal/setting"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

const (
	secret      = servicetest.SecretA
	otherSecret = servicetest.SecretB
	replayTTL   = 24 * time.Hour
	authTTL     = 7 * 24 * time.Hour
)

// env is the service (servicetest) with the simulator on the test's clock,
// so that authorizations expire at the provider as the test moves time;
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
	// wrap, if set, wraps the provider the instances call.
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
	options := []servicetest.Option{
		servicetest.WithSimOnTheClock(),
		servicetest.WithProviderTimeout(opts.providerTimeout),
		servicetest.WithHooks(opts.hooks),
		servicetest.WithRecovery(idempotency.RecoveryPolicy{MaxAttempts: 20}),
		servicetest.WithConfig(func(c *app.Config) {
			c.ReplayTTL, c.Lease = replayTTL, lease(opts)
			c.Settings = setting.Values{authorizations.SettingTTL: authTTL}
		}),
		// A lost answer: the simulator holds it past the provider timeout.
		func(o *servicetest.Options) { o.Sim.HangFor = opts.providerTimeout + time.Second },
	}
	if opts.wrap != nil {
		options = append(options, servicetest.WithProvider(opts.wrap))
	}
	s := servicetest.New(t, options...)
	e := &env{t: t, urls: []string{s.URL}, pool: s.Pool, clk: s.Clock, sim: s.Sim, simURL: s.SimURL, cores: []*app.Core{s.Core}}
	for range opts.instances - 1 {
		url, core, _ := s.Process()
		e.urls = append(e.urls, url)
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
