package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stripe/stripe-go/v76/webhook"

	"github.com/paymentsapi/paymentsapi/internal/apikeys"
	"github.com/paymentsapi/paymentsapi/internal/app"
	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/database"
	"github.com/paymentsapi/paymentsapi/internal/httpapi"
	"github.com/paymentsapi/paymentsapi/internal/ledger"
	"github.com/paymentsapi/paymentsapi/internal/metrics"
	"github.com/paymentsapi/paymentsapi/internal/operation"
	"github.com/paymentsapi/paymentsapi/internal/outbox"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
	"github.com/paymentsapi/paymentsapi/internal/provider/sim"
	"github.com/paymentsapi/paymentsapi/internal/provider/simclient"
	"github.com/paymentsapi/paymentsapi/internal/provider/stripeprovider"
	smt "github.com/paymentsapi/paymentsapi/internal/statemachine/statemachinetest"
	"github.com/paymentsapi/paymentsapi/internal/webhooks"
)

const (
	toySecret        = "sk_test_toy"
	toyWebhookSecret = "whsec_test_toy"
	toyReplayTTL     = 24 * time.Hour
	toyLease         = 30 * time.Second
)

// toyEnv is the real HTTP server, as cmd/paymentsapi wires it, on a real
// PostgreSQL database holding the toy's tables, with the toy operation
// registered through app.Config.ExtraModules and nothing else.
type toyEnv struct {
	t     *testing.T
	url   string
	pool  *pgxpool.Pool
	clk   *clock.Fake
	maker *fakeMaker
	core  *app.Core
}

func newToyEnv(t *testing.T) *toyEnv {
	t.Helper()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	smt.CreateWidgets(t, pool)
	if _, err := pool.Exec(ctx, widgetMigration); err != nil {
		t.Fatalf("the toy's migration: %v", err)
	}
	if _, err := apikeys.Add(ctx, pool, apikeys.Hasher{}, []apikeys.Pair{{Tenant: "tenant_toy", Secret: toySecret}}, time.Now()); err != nil {
		t.Fatal(err)
	}
	// The built-in operations are built too, on a simulator they never call.
	simSrv := httptest.NewServer(sim.New(sim.Options{}))
	t.Cleanup(simSrv.Close)

	clk := clock.NewFake(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC))
	maker := newFakeMaker(t)
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	log := slog.New(slog.DiscardHandler)
	core := app.New(app.Deps{DB: pool, Provider: simclient.New(simSrv.URL, nil), Clock: clk, Log: log, Metrics: m}, app.Config{
		ReplayTTL: toyReplayTTL, Lease: toyLease, RetryAfter: time.Second, ProviderTimeout: 5 * time.Second,
		ProviderKeyWindow: 24 * time.Hour, StripeWebhookSecret: toyWebhookSecret, CommitMode: pgtest.CommitMode(),
		ExtraModules: []operation.Module{widgetModule(maker)},
	})
	srv := httptest.NewServer(httpapi.NewServer(core.HTTPDeps(httpapi.Deps{
		DB: pool, Log: log, Metrics: m, Gatherer: reg, OpenAPI: []byte("openapi: 3.1.0\n"),
		Ready: func(ctx context.Context) error { return database.Ready(ctx, pool) }, Clock: clk,
	})))
	t.Cleanup(srv.Close)
	return &toyEnv{t: t, url: srv.URL, pool: pool, clk: clk, maker: maker, core: core}
}

// toyResponse is an HTTP answer, read whole.
type toyResponse struct {
	status int
	header http.Header
	body   []byte
}

func (r toyResponse) json(t *testing.T) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatalf("body is not a JSON object: %v: %s", err, r.body)
	}
	return v
}

func (r toyResponse) String() string { return fmt.Sprintf("%d %s", r.status, r.body) }

func (e *toyEnv) do(method, path string, body []byte, header map[string]string) toyResponse {
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
	return toyResponse{status: resp.StatusCode, header: resp.Header, body: b}
}

// order sends POST /widgets with key and body.
func (e *toyEnv) order(key, body string) toyResponse {
	e.t.Helper()
	return e.do("POST", "/widgets", []byte(body), map[string]string{
		"Authorization": "Bearer " + toySecret, "Idempotency-Key": key, "Content-Type": "application/json",
	})
}

func (e *toyEnv) get(path string) toyResponse {
	e.t.Helper()
	return e.do("GET", path, nil, map[string]string{"Authorization": "Bearer " + toySecret})
}

// widgetBody is a widget order of amount EUR.
func widgetBody(amount, note string) string {
	return fmt.Sprintf(`{"accountId":"acc_1","amount":%q,"currency":"EUR","note":%q}`, amount, note)
}

// key is the key row of the tenant's idempotency key.
type keyRow struct {
	operation, resourceType, resourceID string
	responseStatus                      *int
	responseBody                        []byte
}

func (e *toyEnv) key(key string) keyRow {
	e.t.Helper()
	var k keyRow
	err := e.pool.QueryRow(context.Background(), `
		SELECT operation, resource_type, resource_id, response_status, response_body
		FROM idempotency_keys WHERE tenant_id = 'tenant_toy' AND idempotency_key = $1`, key).
		Scan(&k.operation, &k.resourceType, &k.resourceID, &k.responseStatus, &k.responseBody)
	if err != nil {
		e.t.Fatalf("key %s: %v", key, err)
	}
	return k
}

func (e *toyEnv) state(id string) smt.WidgetState {
	e.t.Helper()
	var s smt.WidgetState
	if err := e.pool.QueryRow(context.Background(), `SELECT state FROM widgets WHERE id = $1`, id).Scan(&s); err != nil {
		e.t.Fatal(err)
	}
	return s
}

// events returns the outbox's events about widget id, in order.
func (e *toyEnv) events(id string) []outbox.Event {
	e.t.Helper()
	rows, err := e.pool.Query(context.Background(), `
		SELECT id::text, event_type, aggregate_type, aggregate_id, created_at, payload
		FROM outbox_events WHERE aggregate_id = $1 ORDER BY seq`, id)
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	var out []outbox.Event
	for rows.Next() {
		var ev outbox.Event
		if err := rows.Scan(&ev.ID, &ev.Type, &ev.AggregateType, &ev.AggregateID, &ev.OccurredAt, &ev.Payload); err != nil {
			e.t.Fatal(err)
		}
		out = append(out, ev)
	}
	if err := rows.Err(); err != nil {
		e.t.Fatal(err)
	}
	return out
}

func eventTypes(evs []outbox.Event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev.Type + "/" + ev.AggregateType
	}
	return out
}

// deliver posts a Stripe event about a widget of the factory, signed now.
func (e *toyEnv) deliver(eventID, object string) toyResponse {
	e.t.Helper()
	payload := fmt.Appendf(nil, `{"id":%q,"object":"event","api_version":"2023-10-16","created":1795000000,"livemode":false,`+
		`"type":"widget.made","data":{"object":%s}}`, eventID, object)
	header := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payload, Secret: toyWebhookSecret, Timestamp: e.clk.Now()}).Header
	return e.do("POST", "/webhooks/stripe", payload, map[string]string{"Content-Type": "application/json", "Stripe-Signature": header})
}

// lostWidget orders a widget whose factory answer is lost: 202, unknown.
func (e *toyEnv) lostWidget(key string) string {
	e.t.Helper()
	e.maker.will(losesAnswer)
	r := e.order(key, widgetBody("3.00", key))
	if r.status != http.StatusAccepted || r.header.Get("Retry-After") == "" {
		e.t.Fatalf("a lost answer: %v, Retry-After %q; want 202 with Retry-After", r, r.header.Get("Retry-After"))
	}
	id := r.json(e.t)["widgetId"].(string)
	if s := e.state(id); s != smt.WidgetUnknown {
		e.t.Fatalf("a lost answer left the widget %s", s)
	}
	if k := e.key(key); k.responseStatus != nil {
		e.t.Fatalf("a 202 was stored: %d", *k.responseStatus)
	}
	return id
}

// TestToyOperationFromOneRegistration: the recipe for an operation is code.
// create_widget, an operation the service has never heard of with a provider
// port of its own, is registered only through app.Config.ExtraModules;
// through the real HTTP server and the database it gets routes, idempotency,
// recovery, events and the ledger, rendering, errors and the provider's
// webhooks from that one registration.
func TestToyOperationFromOneRegistration(t *testing.T) {
	t.Parallel()
	e := newToyEnv(t)
	ctx := context.Background()

	// Routes, the idempotency row, rendering: a made widget is 201 with
	// its view and Location, and its key is create_widget's.
	e.maker.will(makes)
	const madeKey = "toy-made-1"
	made := e.order(madeKey, widgetBody("12.50", "blue"))
	if made.status != http.StatusCreated {
		t.Fatalf("POST /widgets: %v, want 201", made)
	}
	view := made.json(t)
	id, _ := view["widgetId"].(string)
	if view["status"] != string(smt.WidgetSucceeded) || view["amount"] != "12.50" || view["providerReference"] == "" ||
		made.header.Get("Location") != "/widgets/"+id || made.header.Get(httpapi.ReplayedHeader) != "" {
		t.Errorf("the 201: %v, Location %q", made, made.header.Get("Location"))
	}
	if k := e.key(madeKey); k.operation != widgetOperation || k.resourceType != widgetType || k.resourceID != id ||
		k.responseStatus == nil || *k.responseStatus != http.StatusCreated || !bytes.Equal(k.responseBody, made.body) {
		t.Errorf("the key's row: %+v, want create_widget's, widget %s, the 201 stored", k, id)
	}
	if got := e.get("/widgets/" + id); got.status != http.StatusOK || got.json(t)["widgetId"] != id {
		t.Errorf("GET /widgets/%s: %v", id, got)
	}

	t.Run("idempotency", func(t *testing.T) {
		// A retry replays the stored bytes; the factory is not asked again.
		again := e.order(madeKey, widgetBody("12.50", "blue"))
		if again.status != made.status || !bytes.Equal(again.body, made.body) || again.header.Get(httpapi.ReplayedHeader) != "true" ||
			again.header.Get("Location") != made.header.Get("Location") {
			t.Errorf("retry: %v (%s: %q), want the stored 201 replayed", again, httpapi.ReplayedHeader, again.header.Get(httpapi.ReplayedHeader))
		}
		if makes, _ := e.maker.calls(id); makes != 1 {
			t.Errorf("%d Makes for one widget", makes)
		}
		// Another command under the key: 422.
		if r := e.order(madeKey, widgetBody("99.00", "blue")); r.status != http.StatusUnprocessableEntity ||
			r.json(t)["code"] != "IDEMPOTENCY_KEY_REUSED" {
			t.Errorf("another body under the key: %v, want 422 IDEMPOTENCY_KEY_REUSED", r)
		}
		// A duplicate while the original is at the factory: 409 in use.
		e.maker.will(blocks)
		first := make(chan toyResponse, 1)
		go func() { first <- e.order("toy-inflight", widgetBody("1.00", "slow")) }()
		<-e.maker.entered
		dup := e.order("toy-inflight", widgetBody("1.00", "slow"))
		close(e.maker.release)
		if dup.status != http.StatusConflict || dup.json(t)["code"] != "IDEMPOTENCY_KEY_IN_USE" || dup.header.Get("Retry-After") == "" {
			t.Errorf("a duplicate in flight: %v, want 409 IDEMPOTENCY_KEY_IN_USE with Retry-After", dup)
		}
		if r := <-first; r.status != http.StatusCreated {
			t.Errorf("the original: %v", r)
		}
		if r := e.do("POST", "/widgets", []byte(widgetBody("1.00", "x")), map[string]string{
			"Authorization": "Bearer " + toySecret, "Content-Type": "application/json",
		}); r.status != http.StatusBadRequest || r.json(t)["code"] != "IDEMPOTENCY_KEY_MISSING" {
			t.Errorf("no key: %v", r)
		}
	})

	t.Run("rendering of a decline, stored", func(t *testing.T) {
		e.maker.will(declines)
		r := e.order("toy-declined", widgetBody("5.00", "red"))
		p := r.json(t)
		if r.status != http.StatusPaymentRequired || p["code"] != string(codeWidgetDeclined) || p["declineCode"] != "out_of_stock" ||
			p["widgetId"] == "" || r.header.Get("Content-Type") != "application/problem+json" {
			t.Fatalf("a decline: %v, want 402 WIDGET_DECLINED naming the widget", r)
		}
		if k := e.key("toy-declined"); k.responseStatus == nil || *k.responseStatus != http.StatusPaymentRequired {
			t.Errorf("the 402 was not stored: %+v", k)
		}
		if again := e.order("toy-declined", widgetBody("5.00", "red")); again.status != r.status || !bytes.Equal(again.body, r.body) ||
			again.header.Get(httpapi.ReplayedHeader) != "true" {
			t.Errorf("retry of a decline: %v", again)
		}
		if got := eventTypes(e.events(p["widgetId"].(string))); fmt.Sprint(got) != "[WidgetCreated/widget WidgetDeclined/widget]" {
			t.Errorf("a decline's events: %v", got)
		}
	})

	t.Run("errors", func(t *testing.T) {
		if r := e.get("/widgets/wdg_nope"); r.status != http.StatusNotFound || r.json(t)["code"] != string(codeWidgetNotFound) {
			t.Errorf("an unknown widget: %v, want 404 WIDGET_NOT_FOUND", r)
		}
		if r := e.order("toy-closed", `{"accountId":"acc_closed","amount":"1.00","currency":"EUR","note":""}`); r.status != http.StatusConflict ||
			r.json(t)["code"] != string(codeWidgetAccountClosed) {
			t.Errorf("the toy's own error: %v, want 409 WIDGET_ACCOUNT_CLOSED", r)
		}
		r := e.order("toy-invalid", widgetBody("-1", "x"))
		if r.status != http.StatusBadRequest || r.json(t)["code"] != "VALIDATION_FAILED" {
			t.Fatalf("a bad amount: %v, want 400 VALIDATION_FAILED", r)
		}
		if errs, _ := r.json(t)["errors"].([]any); len(errs) != 1 || errs[0].(map[string]any)["field"] != "amount" {
			t.Errorf("the fields: %s", r.body)
		}
		var n int
		if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM idempotency_keys WHERE idempotency_key IN ('toy-closed', 'toy-invalid')`).Scan(&n); err != nil || n != 0 {
			t.Errorf("refused commands left %d keys (%v)", n, err)
		}
	})

	t.Run("events and the ledger", func(t *testing.T) {
		evs := e.events(id)
		if got := eventTypes(evs); fmt.Sprint(got) != "[WidgetCreated/widget WidgetMade/widget]" {
			t.Fatalf("a made widget's events: %v", got)
		}
		// A projector of the registered modules books the toy's entry; one
		// without the toy books nothing.
		without := ledger.NewProjector(ledger.Deps{DB: e.pool, Clock: e.clk, Modules: app.Modules(app.Config{})}, "ledger-without-toy")
		if o, err := without.Apply(ctx, evs[1]); err != nil || o != ledger.OutcomeIgnored {
			t.Errorf("without the toy: %s %v, want ignored", o, err)
		}
		proj := ledger.NewProjector(ledger.Deps{DB: e.pool, Clock: e.clk, Modules: e.core.Modules}, "")
		if o, err := proj.Apply(ctx, evs[0]); err != nil || o != ledger.OutcomeIgnored {
			t.Errorf("WidgetCreated: %s %v, want ignored", o, err)
		}
		if o, err := proj.Apply(ctx, evs[1]); err != nil || o != ledger.OutcomeApplied {
			t.Fatalf("WidgetMade: %s %v, want applied", o, err)
		}
		var (
			account, currency, tenant, ref string
			minor                          int64
		)
		err := e.pool.QueryRow(ctx, `SELECT account_id, amount_minor, currency, tenant_id, provider_reference
			FROM ledger_entries WHERE payment_id = $1 AND entry_type = $2`, id, entryWidgetMade).
			Scan(&account, &minor, &currency, &tenant, &ref)
		if err != nil || account != "acc_1" || minor != 1250 || currency != "EUR" || tenant != "tenant_toy" || ref != view["providerReference"] {
			t.Errorf("the entry: %s %d %s %s %s (%v)", account, minor, currency, tenant, ref, err)
		}
	})

	t.Run("recovery", func(t *testing.T) {
		lost := e.lostWidget("toy-lost")
		e.clk.Advance(toyLease + time.Second) // the first owner's lease is over
		stats, err := e.core.Reconciler.RunOnce(ctx, 10)
		if err != nil || stats["succeeded"] != 1 {
			t.Fatalf("reconciler: %v %v, want one succeeded", stats, err)
		}
		if makes, finds := e.maker.calls(lost); makes != 1 || finds != 1 {
			t.Errorf("recovery: %d Makes, %d Finds; want 1 and 1 (looked up, never made again)", makes, finds)
		}
		r := e.order("toy-lost", widgetBody("3.00", "toy-lost"))
		if r.status != http.StatusCreated || r.header.Get(httpapi.ReplayedHeader) != "true" || r.json(t)["widgetId"] != lost {
			t.Errorf("retry after recovery: %v, want the stored 201", r)
		}
		if got := eventTypes(e.events(lost)); fmt.Sprint(got) != "[WidgetCreated/widget WidgetMade/widget]" {
			t.Errorf("a recovered widget's events: %v", got)
		}
	})

	t.Run("provider events", func(t *testing.T) {
		byMetadata := e.lostWidget("toy-hook-1")
		byKey := e.lostWidget("toy-hook-2")
		for _, c := range []struct{ id, event, object string }{
			{byMetadata, "evt_w1", fmt.Sprintf(`{"id":"wm_x1","object":"widget","metadata":{%q:%q}}`, widgetMetadataID, byMetadata)},
			{byKey, "evt_w2", fmt.Sprintf(`{"id":"wm_x2","object":"widget","metadata":{%q:%q}}`,
				stripeprovider.MetadataIdempotencyKey, widgetProviderKey(byKey))},
		} {
			r := e.deliver(c.event, c.object)
			if a := r.json(t); r.status != http.StatusOK || a["outcome"] != webhooks.OutcomeApplied || a["resolution"] != "succeeded" {
				t.Errorf("%s: %v, want applied, succeeded", c.event, r)
			}
			if s := e.state(c.id); s != smt.WidgetSucceeded {
				t.Errorf("%s left widget %s %s", c.event, c.id, s)
			}
			if makes, _ := e.maker.calls(c.id); makes != 1 {
				t.Errorf("%s: %d Makes, want 1", c.event, makes)
			}
		}
	})

	t.Run("expired key names the widget", func(t *testing.T) {
		e.clk.Advance(toyReplayTTL + time.Second)
		r := e.order(madeKey, widgetBody("12.50", "blue"))
		if p := r.json(t); r.status != http.StatusConflict || p["code"] != "IDEMPOTENCY_KEY_EXPIRED" || p["widgetId"] != id {
			t.Errorf("an expired key: %v, want 409 IDEMPOTENCY_KEY_EXPIRED with widgetId %s", r, id)
		}
	})
}
