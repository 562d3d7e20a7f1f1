package eventlog_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paymentsapi/paymentsapi/internal/app"
	"github.com/paymentsapi/paymentsapi/internal/cleanup"
	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/eventlog"
	"github.com/paymentsapi/paymentsapi/internal/outbox"
	"github.com/paymentsapi/paymentsapi/internal/outbox/stream"
	"github.com/paymentsapi/paymentsapi/internal/payments"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
	"github.com/paymentsapi/paymentsapi/internal/refunds"
	"github.com/paymentsapi/paymentsapi/internal/servicetest"
	"github.com/paymentsapi/paymentsapi/internal/testio"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

const (
	secretA = servicetest.SecretA
	secretB = servicetest.SecretB
)

// env is the API as cmd/paymentsapi wires it, on a database of its own,
// with the outbox's stream relay run by hand (RunOnce): its publisher is
// the event log's, wrapping a publisher that remembers what it was given.
type env struct {
	t     *testing.T
	url   string
	pool  *pgxpool.Pool
	clk   *clock.Fake
	core  *app.Core
	relay *stream.Relay
	next  *recorder
	tries atomic.Int32 // publishes the relay asked of the event log's publisher
}

type recorder struct {
	mu        sync.Mutex
	published []outbox.Event
}

func (r *recorder) Publish(_ context.Context, e outbox.Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.published = append(r.published, e)
	return nil
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.published)
}

// counted counts the publishes (single or batched) the relay asks of next.
type counted struct {
	next  outbox.BatchPublisher
	tries *atomic.Int32
}

func (c counted) Publish(ctx context.Context, e outbox.Event) error {
	c.tries.Add(1)
	return c.next.Publish(ctx, e)
}

func (c counted) PublishBatch(ctx context.Context, events []outbox.Event) []error {
	c.tries.Add(1)
	return c.next.PublishBatch(ctx, events)
}

// newEnv is servicetest's service, with the outbox's stream relay beside
// it, run by hand.
func newEnv(t *testing.T) *env {
	t.Helper()
	svc := servicetest.New(t)
	e := &env{t: t, url: svc.URL, pool: svc.Pool, clk: svc.Clock, core: svc.Core, next: &recorder{}}
	e.relay = stream.NewRelay(stream.RelayDeps{
		ConnString: e.pool.Config().ConnConfig.ConnString(), DB: e.pool,
		Publisher: counted{next: e.core.EventLog.Publisher(e.next), tries: &e.tries}, Clock: e.clk, Log: servicetest.TestLogger(),
	}, stream.RelayConfig{SendConfig: outbox.SendConfig{Backoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, MaxAttempts: 3}})
	t.Cleanup(func() { e.relay.Close(context.Background()) })
	return e
}

type response struct {
	status int
	body   []byte
}

func (e *env) do(secret, method, path, key, body string) response {
	e.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = bytes.NewReader([]byte(body))
	}
	req, err := http.NewRequest(method, e.url+path, rd)
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
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{resp.StatusCode, b}
}

func (e *env) pay(secret, key, method, capture string) string {
	e.t.Helper()
	r := e.do(secret, "POST", "/payments", key, fmt.Sprintf(
		`{"accountId":"acc_1","amount":"10.00","currency":"EUR","merchantReference":"inv-%s","paymentMethod":%q%s}`, key, method, capture))
	if r.status >= 300 && r.status != http.StatusPaymentRequired {
		e.t.Fatalf("payment: %d %s", r.status, r.body)
	}
	var v struct{ PaymentID string }
	_ = json.Unmarshal(r.body, &v)
	return v.PaymentID
}

// relayAll publishes everything committed so far (the first call creates
// the database's slot and publishes from the table what came before it).
func (e *env) relayAll() {
	e.t.Helper()
	if _, err := e.relay.RunOnce(context.Background()); err != nil {
		e.t.Fatal(err)
	}
}

type page struct {
	Items []struct {
		EventID   string          `json:"eventId"`
		Type      string          `json:"type"`
		CreatedAt time.Time       `json:"createdAt"`
		Data      json.RawMessage `json:"data"`
	} `json:"items"`
	NextCursor string `json:"nextCursor"`
}

func (e *env) events(secret, query string) page {
	e.t.Helper()
	r := e.do(secret, "GET", "/events"+query, "", "")
	if r.status != http.StatusOK {
		e.t.Fatalf("GET /events%s: %d %s", query, r.status, r.body)
	}
	var p page
	if err := json.Unmarshal(r.body, &p); err != nil {
		e.t.Fatal(err)
	}
	return p
}

// Every event of a tenant's payments and refunds is in its log from the
// commit that wrote it (the log is the outbox), named for merchants, with
// the resource's body as of the event, newest first; never another
// tenant's. Publishing it, once or again, changes nothing in the log.
func TestTheLogHoldsEveryEventOfTheTenantOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	paid := e.pay(secretA, "p1", "pm_card_visa", "")
	e.clk.Advance(time.Second)
	declined := e.pay(secretA, "p2", "pm_card_chargeDeclined", "")
	e.clk.Advance(time.Second)
	authorized := e.pay(secretA, "p3", "pm_card_visa", `,"captureMethod":"manual"`)
	e.clk.Advance(time.Second)
	if r := e.do(secretA, "POST", "/payments/"+authorized+"/cancel", "c3", ""); r.status != http.StatusOK {
		t.Fatalf("cancel: %d %s", r.status, r.body)
	}
	e.clk.Advance(time.Second)
	if r := e.do(secretA, "POST", "/payments/"+paid+"/refunds", "r1", `{"amount":"4.00"}`); r.status != http.StatusCreated {
		t.Fatalf("refund: %d %s", r.status, r.body)
	}
	e.pay(secretB, "other", "pm_card_visa", "")

	got := e.events(secretA, "?limit=100") // before the relay ran
	var types []string
	for _, it := range got.Items {
		types = append(types, it.Type)
	}
	// Events of one instant have no order among them (one request's).
	want := []string{"payment.authorized", "payment.canceled", "payment.created", "payment.created", "payment.created",
		"payment.declined", "payment.succeeded", "refund.created", "refund.succeeded"}
	sorted := slices.Sorted(slices.Values(types))
	if fmt.Sprint(sorted) != fmt.Sprint(want) {
		t.Fatalf("tenant A's events:\n got %v\nwant %v", sorted, want)
	}
	for i := 1; i < len(got.Items); i++ {
		if got.Items[i].CreatedAt.After(got.Items[i-1].CreatedAt) {
			t.Fatalf("not newest first: %v after %v", got.Items[i].CreatedAt, got.Items[i-1].CreatedAt)
		}
	}
	if last := got.Items[len(got.Items)-1]; last.Type != "payment.created" && last.Type != "payment.succeeded" {
		t.Fatalf("the oldest event is %s", last.Type)
	}
	var data struct{ PaymentID, Status string }
	for _, it := range got.Items {
		if it.Type == "payment.succeeded" {
			if err := json.Unmarshal(it.Data, &data); err != nil || data.PaymentID != paid || data.Status != "SUCCEEDED" {
				t.Fatalf("payment.succeeded's data: %s", it.Data)
			}
		}
	}
	// Each event's data is its resource's view and nothing more: the keys
	// only consumers read (the tenant, a refund's account) are cut.
	for _, it := range got.Items {
		var view any = &payments.View{}
		if strings.HasPrefix(it.Type, "refund.") {
			view = &refunds.View{}
		}
		dec := json.NewDecoder(bytes.NewReader(it.Data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(view); err != nil {
			t.Fatalf("%s's data is not its resource's view (%v): %s", it.Type, err, it.Data)
		}
		if bytes.Contains(it.Data, []byte("tenant")) {
			t.Fatalf("%s's data shows the tenant: %s", it.Type, it.Data)
		}
	}
	_ = declined

	// Published, then published again (the relay publishes at least
	// once): the log is the same.
	e.relayAll()
	if n := e.next.count(); n != 11 {
		t.Fatalf("published %d events, want 11", n)
	}
	if err := e.core.EventLog.FanOut(t.Context(), e.next.published); err != nil {
		t.Fatal(err)
	}
	if again := e.events(secretA, "?limit=100"); fmt.Sprint(again) != fmt.Sprint(got) {
		t.Fatalf("after the publishes:\n%+v\nbefore:\n%+v", again, got)
	}

	// One event, the tenant's own only.
	id := got.Items[0].EventID
	if r := e.do(secretA, "GET", "/events/"+id, "", ""); r.status != http.StatusOK || !bytes.Contains(r.body, []byte(`"`+got.Items[0].Type+`"`)) {
		t.Fatalf("GET /events/%s: %d %s", id, r.status, r.body)
	}
	if r := e.do(secretB, "GET", "/events/"+id, "", ""); r.status != http.StatusNotFound {
		t.Fatalf("another tenant's GET /events/%s: %d %s", id, r.status, r.body)
	}
	if b := e.events(secretB, ""); len(b.Items) != 2 {
		t.Fatalf("tenant B's events: %+v", b.Items)
	}
}

// The listing pages with a cursor, filters by type and by time, and
// refuses what it cannot read.
func TestListingPagesAndFilters(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	start := e.clk.Now()
	for i := range 5 {
		e.pay(secretA, fmt.Sprintf("p%d", i), "pm_card_visa", "")
		e.clk.Advance(time.Second)
	}
	e.relayAll()
	var seen []string
	cursor := ""
	for pages := 0; ; pages++ {
		q := "?type=payment.succeeded&limit=2"
		if cursor != "" {
			q += "&cursor=" + cursor
		}
		p := e.events(secretA, q)
		for _, it := range p.Items {
			if it.Type != "payment.succeeded" {
				t.Fatalf("type filter let %s through", it.Type)
			}
			seen = append(seen, it.EventID)
		}
		if p.NextCursor == "" {
			if pages != 2 {
				t.Fatalf("%d pages, want 3", pages+1)
			}
			break
		}
		cursor = p.NextCursor
	}
	if len(seen) != 5 {
		t.Fatalf("paged through %d events, want 5", len(seen))
	}
	after := e.events(secretA, "?type=payment.created&after="+start.Add(2*time.Second).Format(time.RFC3339))
	if len(after.Items) != 2 {
		t.Fatalf("events after the third second: %d, want 2", len(after.Items))
	}
	for _, q := range []string{"?type=payment.exploded", "?cursor=nope", "?limit=0", "?after=yesterday"} {
		if r := e.do(secretA, "GET", "/events"+q, "", ""); r.status != http.StatusBadRequest {
			t.Errorf("GET /events%s: %d %s, want 400", q, r.status, r.body)
		}
	}
	if r := e.do(secretA, "GET", "/events/not-a-uuid", "", ""); r.status != http.StatusNotFound {
		t.Errorf("GET /events/not-a-uuid: %d", r.status)
	}
}

// An event whose payload has no tenant, or names another payment than its
// own, or is no object, is not in the log, and its publish says so in the
// service's log; the events beside it are in the log and published.
func TestAnEventItsOperationCannotReadIsLeftOut(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var logs testio.SyncBuffer
	l := eventlog.New(e.pool, e.clk, slog.New(slog.NewTextHandler(&logs, nil)), app.Modules(app.Config{}))
	event := func(aggregate string, payload any) outbox.Event {
		ev, err := outbox.NewEvent(t.Context(), payments.EventSucceeded, payments.ResourceType, aggregate, payload, e.clk.Now())
		if err != nil {
			t.Fatal(err)
		}
		if err := outbox.Write(t.Context(), e.pool, ev); err != nil {
			t.Fatal(err)
		}
		return ev
	}
	good := event("pay_good", map[string]any{"paymentId": "pay_good", "tenantId": "tenant_a", "status": "SUCCEEDED"})
	bad := []outbox.Event{
		event("pay_1", map[string]any{"paymentId": "pay_1", "status": "SUCCEEDED"}),
		event("pay_2", map[string]any{"paymentId": "pay_2", "tenantId": "", "status": "SUCCEEDED"}),
		event("pay_3", map[string]any{"paymentId": "pay_other", "tenantId": "tenant_a"}),
		event("pay_4", []string{"paymentId", "pay_4", "tenantId", "tenant_a"}),
		event("pay_5", "pay_5"),
		event("pay_6", map[string]any{"paymentId": "pay_6", "tenantId": map[string]int{"x": 1}}),
		event("7", map[string]any{"paymentId": 7, "tenantId": "tenant_a"}),
		event("pay_8", map[string]any{"paymentId": "pay_8", "tenantId": 8}),
	}
	got := e.events(secretA, "")
	if len(got.Items) != 1 || got.Items[0].EventID != good.ID || string(got.Items[0].Data) != `{"status":"SUCCEEDED","paymentId":"pay_good"}` {
		t.Fatalf("the log holds %+v, want the good event only, without its tenant", got.Items)
	}
	for _, ev := range bad {
		if r := e.do(secretA, "GET", "/events/"+ev.ID, "", ""); r.status != http.StatusNotFound {
			t.Fatalf("GET /events/%s (%s): %d %s", ev.ID, ev.Payload, r.status, r.body)
		}
	}
	pub := l.Publisher(e.next)
	for i, err := range pub.PublishBatch(t.Context(), append(bad, good)) {
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	if n := e.next.count(); n != len(bad)+1 {
		t.Fatalf("published %d events, want %d: an unreadable one must not hold the others back", n, len(bad)+1)
	}
	for _, ev := range bad {
		if !strings.Contains(logs.String(), "event left out of the event log") || !strings.Contains(logs.String(), ev.ID) {
			t.Fatalf("event %s (%s) left out without a word; logs:\n%s", ev.ID, ev.Payload, logs.String())
		}
	}
	if strings.Contains(logs.String(), good.ID) {
		t.Fatalf("the good event was logged as left out:\n%s", logs.String())
	}
}

// When the log cannot fan an event out to the webhook endpoints, nothing
// is published: the event log's publisher fails the events as the broker's
// failure (ErrBrokerUnavailable), which the relay retries without counting
// attempts, so nothing is parked however long the fan-out fails; it
// publishes them once it works again, fanned out.
func TestNothingIsPublishedThatWasNotFannedOut(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.relayAll() // creates the slot: the payment's events come through its stream
	e.webhook("tenant_a")
	e.pay(secretA, "p1", "pm_card_visa", "")
	if _, err := e.pool.Exec(t.Context(), `ALTER TABLE webhook_messages RENAME TO webhook_messages_away`); err != nil {
		t.Fatal(err)
	}
	type result struct {
		n   int
		err error
	}
	done, finished := make(chan result, 1), make(chan struct{})
	before := e.tries.Load()
	go func() {
		defer close(finished)
		n, err := e.relay.RunOnce(t.Context())
		done <- result{n, err}
	}()
	t.Cleanup(func() { <-finished }) // before the relay's Close: t.Context ends first
	// More tries than MaxAttempts (3): a failure counted against the
	// events would have parked them by then, and stopped the tries.
	deadline := time.Now().Add(30 * time.Second)
	for e.tries.Load()-before < 5 {
		var parked int
		if err := e.pool.QueryRow(t.Context(), `SELECT count(*) FROM outbox_parked`).Scan(&parked); err != nil || parked != 0 {
			t.Fatalf("%d events parked (%v) while the log was away: its failure was counted as theirs", parked, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the relay tried %d publishes in 30s while the log was away, want 5", e.tries.Load()-before)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := e.next.count(); n != 0 {
		t.Fatalf("published %d events the log did not fan out", n)
	}
	if _, err := e.pool.Exec(t.Context(), `ALTER TABLE webhook_messages_away RENAME TO webhook_messages`); err != nil {
		t.Fatal(err)
	}
	var r result
	select {
	case r = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the relay did not publish the events within 30s of the log's return")
	}
	if r.err != nil || r.n != 2 {
		t.Fatalf("RunOnce: published %d, %v; want 2", r.n, r.err)
	}
	var messages int
	if err := e.pool.QueryRow(t.Context(), `SELECT count(*) FROM webhook_messages`).Scan(&messages); err != nil || messages != 2 || e.next.count() != 2 {
		t.Fatalf("after the fan-out came back: %d messages (%v), %d published; want 2 and 2", messages, err, e.next.count())
	}
}

// Clean-up keeps the log's events (the outbox's) EVENT_RETENTION, however
// shorter OUTBOX_RETENTION is, and all of them without an EVENT_RETENTION;
// then they go, with their webhook messages.
func TestCleanupKeepsEventsForTheirRetention(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.webhook("tenant_a")
	e.pay(secretA, "p1", "pm_card_visa", "")
	e.relayAll()
	policy := cleanup.Policy{ReplayTTL: 24 * time.Hour, MetadataTTL: time.Hour, OutboxRetention: time.Hour, EventRetention: 720 * time.Hour}
	j := cleanup.New(e.pool, e.clk, policy, slog.New(slog.DiscardHandler))
	forever := cleanup.New(e.pool, e.clk, cleanup.Policy{ReplayTTL: 24 * time.Hour, MetadataTTL: time.Hour, OutboxRetention: time.Hour},
		slog.New(slog.DiscardHandler))
	count := func() (events, messages int) {
		t.Helper()
		if err := e.pool.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM outbox_events), (SELECT count(*) FROM webhook_messages)`).
			Scan(&events, &messages); err != nil {
			t.Fatal(err)
		}
		return events, messages
	}
	e.clk.Advance(719 * time.Hour)
	if st, err := j.RunOnce(t.Context()); err != nil || st.EventsDeleted != 0 {
		t.Fatalf("before the retention: %+v, %v", st, err)
	}
	if got := e.events(secretA, ""); len(got.Items) != 2 {
		t.Fatalf("the log before its retention: %+v", got.Items)
	}
	e.clk.Advance(time.Hour + time.Second)
	if st, err := forever.RunOnce(t.Context()); err != nil || st.EventsDeleted != 0 {
		t.Fatalf("without an EVENT_RETENTION: %+v, %v; want nothing deleted", st, err)
	}
	if events, messages := count(); events != 2 || messages != 2 {
		t.Fatalf("before the clean-up: %d events, %d messages; want 2 and 2", events, messages)
	}
	if st, err := j.RunOnce(t.Context()); err != nil || st.EventsDeleted != 2 {
		t.Fatalf("at the retention: %+v, %v; want 2 events deleted", st, err)
	}
	if events, messages := count(); events != 0 || messages != 0 {
		t.Fatalf("after the clean-up: %d events, %d messages; want none", events, messages)
	}
	if got := e.events(secretA, ""); len(got.Items) != 0 {
		t.Fatalf("the log after its retention: %+v", got.Items)
	}
}

// webhook adds an enabled endpoint of the tenant that takes every event
// (it is never sent to: no worker runs).
func (e *env) webhook(tenant string) {
	e.t.Helper()
	if _, err := e.pool.Exec(context.Background(), `
		INSERT INTO webhook_endpoints (id, tenant_id, url, status, secret_sealed, secret_id, created_at)
		VALUES ('we_' || $1, $1, 'https://example.com/hooks', 'enabled', 'whsec_x', 'ws_x', $2)`, tenant, e.clk.Now()); err != nil {
		e.t.Fatal(err)
	}
}
