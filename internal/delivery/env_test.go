package delivery_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/paymentsapi/paymentsapi/internal/app"
	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/delivery"
	"github.com/paymentsapi/paymentsapi/internal/endpoints"
	"github.com/paymentsapi/paymentsapi/internal/ids"
	"github.com/paymentsapi/paymentsapi/internal/outbound"
	"github.com/paymentsapi/paymentsapi/internal/outbox"
	"github.com/paymentsapi/paymentsapi/internal/payments"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
	"github.com/paymentsapi/paymentsapi/internal/secretbox"
	"github.com/paymentsapi/paymentsapi/internal/servicetest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// The two tenants of every test, by their API keys.
const (
	tenantA = servicetest.SecretA
	tenantB = servicetest.SecretB
)

// devPolicy is dev mode's: a receiver on loopback, over http, is allowed.
var devPolicy = outbound.Policy{AllowHTTP: true, AllowPrivate: true}

// env is the API as cmd/paymentsapi wires it, on a database of its own and a
// fake clock, with workers made and run by each test, and a receiver that
// verifies every delivery with the Standard Webhooks library.
type env struct {
	t        *testing.T
	url      string
	pool     *pgxpool.Pool
	clk      *clock.Fake
	core     *app.Core
	policy   outbound.Policy
	resolver outbound.Resolver
	secrets  *secretbox.Box
	recv     *receiver
}

// newEnv starts the API with the destination policy p and resolver r (nil:
// the system's). The fake clock starts at the real time, since a receiver's
// library refuses a signature more than 5 minutes from its own clock; the
// tests that move it days on verify ignoring the timestamp.
func newEnv(t *testing.T, p outbound.Policy, r outbound.Resolver) *env {
	t.Helper()
	return newEnvOn(t, pgtest.NewPool(t), p, r)
}

// newEnvOn is newEnv on pool's database.
func newEnvOn(t *testing.T, pool *pgxpool.Pool, p outbound.Policy, r outbound.Resolver) *env {
	t.Helper()
	return newEnvWith(t, pool, p, r, servicetest.NewSecretsBox(t))
}

// newEnvWith is newEnvOn with the secrets box secrets (nil: no
// SECRETS_KEY).
func newEnvWith(t *testing.T, pool *pgxpool.Pool, p outbound.Policy, r outbound.Resolver, secrets *secretbox.Box) *env {
	t.Helper()
	return newEnvCommitting(t, pool, p, r, secrets, pgtest.CommitMode())
}

// newEnvCommitting is newEnvWith whose requests are committed in mode
// (COMMIT_MODE): servicetest's service on pool, its clock at the real time.
func newEnvCommitting(t *testing.T, pool *pgxpool.Pool, p outbound.Policy, r outbound.Resolver, secrets *secretbox.Box, mode string) *env {
	t.Helper()
	svc := servicetest.New(t, servicetest.WithPool(func(testing.TB) *pgxpool.Pool { return pool }), servicetest.WithCommitMode(mode),
		servicetest.WithConfig(func(c *app.Config) { c.Webhooks = endpoints.Options{Policy: p, Resolver: r, Secrets: secrets} }))
	svc.Clock.Set(time.Now())
	return &env{t: t, url: svc.URL, pool: pool, clk: svc.Clock, core: svc.Core, policy: p, resolver: r, secrets: secrets, recv: newReceiver(t)}
}

// worker returns a worker on the env's database and clock, with cfg (its
// policy and resolver the env's).
func (e *env) worker(cfg delivery.Config) *delivery.Worker {
	e.t.Helper()
	return e.workerWith(cfg, nil)
}

// workerWith is worker, counting in m.
func (e *env) workerWith(cfg delivery.Config, m *delivery.Metrics) *delivery.Worker {
	e.t.Helper()
	cfg.Policy = e.policy
	if cfg.Resolver == nil {
		cfg.Resolver = e.resolver
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	w, err := delivery.NewWorker(delivery.Deps{DB: e.pool, Clock: e.clk, Log: slog.New(slog.DiscardHandler), Metrics: m,
		Events: e.core.EventLog.Relation(), Secrets: e.secrets}, cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	return w
}

// runOnce runs one pass of w and returns how many messages it claimed.
func (e *env) runOnce(w *delivery.Worker) int {
	e.t.Helper()
	n, err := w.RunOnce(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

// response is an HTTP answer, read whole.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) String() string { return fmt.Sprintf("%d %s", r.status, r.body) }

func (r response) json(t *testing.T) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatalf("not a JSON object: %v: %s", err, r.body)
	}
	return v
}

// do sends a request as the tenant whose API key is apiKey, with an
// Idempotency-Key when key is set and a JSON body when body is.
func (e *env) do(apiKey, method, path, key, body string) response {
	e.t.Helper()
	req, err := http.NewRequest(method, e.url+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+apiKey)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
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

// endpoint is a registered endpoint, as its creation answered.
type endpoint struct {
	id, secret, path string
}

// register creates an endpoint for the tenant at url (201 expected), with
// the event types given (none: every type).
func (e *env) register(apiKey, url string, types ...string) endpoint {
	e.t.Helper()
	body := map[string]any{"url": url}
	if len(types) > 0 {
		body["eventTypes"] = types
	}
	b, _ := json.Marshal(body)
	r := e.do(apiKey, "POST", "/webhook-endpoints", "reg-"+url, string(b))
	if r.status != http.StatusCreated {
		e.t.Fatalf("register %s: %v", url, r)
	}
	v := r.json(e.t)
	return endpoint{id: v["endpointId"].(string), secret: v["secret"].(string), path: strings.TrimPrefix(url, e.recv.srv.URL)}
}

// hook registers, for the tenant, an endpoint at the receiver's path and
// tells the receiver its secret.
func (e *env) hook(apiKey, path string, types ...string) endpoint {
	e.t.Helper()
	ep := e.register(apiKey, e.recv.srv.URL+path, types...)
	e.recv.expect(path, ep.secret)
	return ep
}

// record writes one event of a payment of the tenant (tenant_a, tenant_b)
// to the outbox, of type eventType (payments.EventCreated, ...), and fans it
// out to the tenant's endpoints, as the relay's publish does, and returns
// its id.
func (e *env) record(tenant, eventType string) string {
	e.t.Helper()
	ev := e.event(tenant, eventType)
	if err := e.core.EventLog.FanOut(context.Background(), []outbox.Event{ev}); err != nil {
		e.t.Fatal(err)
	}
	return ev.ID
}

// event writes an outbox event of a new payment of the tenant, as the
// payment's transaction does, and returns it.
func (e *env) event(tenant, eventType string) outbox.Event {
	e.t.Helper()
	ev := e.draft(tenant, eventType)
	e.write(ev)
	return ev
}

// draft is an outbox event of a new payment of the tenant, not written.
func (e *env) draft(tenant, eventType string) outbox.Event {
	e.t.Helper()
	id := ids.New("pay_")
	ev, err := outbox.NewEvent(context.Background(), eventType, "payment", id, map[string]any{
		"paymentId": id, "tenantId": tenant, "status": "SUCCEEDED", "amount": "10.00", "currency": "EUR",
	}, e.clk.Now())
	if err != nil {
		e.t.Fatal(err)
	}
	return ev
}

// write writes ev to the outbox.
func (e *env) write(ev outbox.Event) {
	e.t.Helper()
	if err := outbox.Write(context.Background(), e.pool, ev); err != nil {
		e.t.Fatal(err)
	}
}

// relayed records that the database's relay has published everything
// committed up to at (its position), as a running relay would.
func (e *env) relayed(at time.Time) {
	e.t.Helper()
	if _, err := e.pool.Exec(context.Background(), `
		INSERT INTO outbox_stream_positions (slot, committed_at, updated_at) VALUES ('test', $1, $1)`, at); err != nil {
		e.t.Fatal(err)
	}
}

// messages counts the messages of endpoint id in each status.
func (e *env) messages(id string) map[string]int {
	e.t.Helper()
	rows, err := e.pool.Query(context.Background(), `SELECT status, count(*)::int FROM webhook_messages WHERE endpoint_id = $1 GROUP BY status`, id)
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var (
			s string
			n int
		)
		if err := rows.Scan(&s, &n); err != nil {
			e.t.Fatal(err)
		}
		out[s] = n
	}
	return out
}

// deliveries returns GET /events/{eventId}/deliveries as the tenant sees it.
func (e *env) deliveries(apiKey, eventID string) []map[string]any {
	e.t.Helper()
	r := e.do(apiKey, "GET", "/events/"+eventID+"/deliveries", "", "")
	if r.status != http.StatusOK {
		e.t.Fatalf("deliveries of %s: %v", eventID, r)
	}
	var v struct {
		Items []map[string]any `json:"items"`
	}
	if err := json.Unmarshal(r.body, &v); err != nil {
		e.t.Fatal(err)
	}
	return v.Items
}

// receipt is one request the receiver got.
type receipt struct {
	path, id  string
	timestamp int64
	sigs      []string
	body      []byte
	typ       string
}

// receiver is an HTTP server for the endpoints of a test. It verifies every
// request with the Standard Webhooks library, with each secret the test
// expects for its path (every one must verify: during a rotation both
// sign), and records it; what it answers is the path's behaviour (default
// 200). It counts, per path and webhook-id, the requests in flight, to
// catch two sends of one message at once.
type receiver struct {
	t   *testing.T
	srv *httptest.Server

	mu          sync.Mutex
	secrets     map[string][]string
	behave      map[string]func(w http.ResponseWriter, r *http.Request)
	got         []receipt
	inFlight    map[string]int // path + webhook-id
	maxInFlight int
	perPath     map[string]int // requests in flight per path
	maxPerPath  map[string]int
}

func newReceiver(t *testing.T) *receiver {
	rc := &receiver{t: t, secrets: map[string][]string{}, behave: map[string]func(http.ResponseWriter, *http.Request){},
		inFlight: map[string]int{}, perPath: map[string]int{}, maxPerPath: map[string]int{}}
	rc.srv = httptest.NewServer(http.HandlerFunc(rc.serve))
	t.Cleanup(rc.srv.Close)
	return rc
}

// expect sets the secrets that must each verify the requests to path.
func (rc *receiver) expect(path string, secrets ...string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.secrets[path] = secrets
}

// answer sets what path answers.
func (rc *receiver) answer(path string, h func(w http.ResponseWriter, r *http.Request)) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.behave[path] = h
}

// status makes path answer code.
func (rc *receiver) status(path string, code int) {
	rc.answer(path, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(code) })
}

func (rc *receiver) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		rc.t.Errorf("receiver: %v", err)
		return
	}
	id := r.Header.Get("webhook-id")
	key := r.URL.Path + " " + id
	rc.mu.Lock()
	secrets, h := rc.secrets[r.URL.Path], rc.behave[r.URL.Path]
	rc.inFlight[key]++
	rc.maxInFlight = max(rc.maxInFlight, rc.inFlight[key])
	rc.perPath[r.URL.Path]++
	rc.maxPerPath[r.URL.Path] = max(rc.maxPerPath[r.URL.Path], rc.perPath[r.URL.Path])
	rc.mu.Unlock()
	defer func() {
		rc.mu.Lock()
		rc.inFlight[key]--
		rc.perPath[r.URL.Path]--
		rc.mu.Unlock()
	}()

	if len(secrets) == 0 {
		rc.t.Errorf("receiver: a request to %s, which expects no secret", r.URL.Path)
	}
	for _, s := range secrets {
		wh, err := standardwebhooks.NewWebhook(s)
		if err != nil {
			rc.t.Errorf("receiver: %v", err)
			continue
		}
		// The timestamp is the fake clock's, which the tests move by days:
		// it is checked against the clock by the tests that care.
		if err := wh.VerifyIgnoringTimestamp(body, r.Header); err != nil {
			rc.t.Errorf("receiver: a request to %s does not verify with one of its secrets: %v", r.URL.Path, err)
		}
	}
	var msg struct {
		Type      string          `json:"type"`
		Timestamp time.Time       `json:"timestamp"`
		Data      json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &msg); err != nil || msg.Type == "" || msg.Timestamp.IsZero() || len(msg.Data) == 0 {
		rc.t.Errorf("receiver: body %s is not {type, timestamp, data}: %v", body, err)
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		rc.t.Errorf("receiver: Content-Type %q", ct)
	}
	ts, err := strconv.ParseInt(r.Header.Get("webhook-timestamp"), 10, 64)
	if err != nil {
		rc.t.Errorf("receiver: webhook-timestamp %q", r.Header.Get("webhook-timestamp"))
	}
	rc.mu.Lock()
	rc.got = append(rc.got, receipt{path: r.URL.Path, id: id, timestamp: ts, sigs: strings.Fields(r.Header.Get("webhook-signature")),
		body: body, typ: msg.Type})
	rc.mu.Unlock()
	if h != nil {
		h(w, r)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// receipts returns what path got, in order.
func (rc *receiver) receipts(path string) []receipt {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var out []receipt
	for _, r := range rc.got {
		if r.path == path {
			out = append(out, r)
		}
	}
	return out
}

// ids returns the webhook-ids path got, in order.
func (rc *receiver) ids(path string) []string {
	var out []string
	for _, r := range rc.receipts(path) {
		out = append(out, r.id)
	}
	return out
}

// resolverFunc is an outbound.Resolver from a function.
type resolverFunc func(ctx context.Context, network, host string) ([]netip.Addr, error)

func (f resolverFunc) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	return f(ctx, network, host)
}

// waitFor polls cond until it holds, or fails the test after d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// jsonBody is v encoded.
func jsonBody(v any) string {
	var b bytes.Buffer
	_ = json.NewEncoder(&b).Encode(v)
	return b.String()
}

// The payments' event types the tests record.
const (
	created   = payments.EventCreated
	succeeded = payments.EventSucceeded
)
