package outbox_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/outbox"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

var t0 = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

// recorder is a Publisher that remembers what it published, in order, and
// fails when fail says so.
type recorder struct {
	mu     sync.Mutex
	events []outbox.Event
	by     []string
	calls  int
	fail   func(e outbox.Event) error
	sleep  time.Duration // up to this long per publish, at random
	before func(publisher string)
}

func (r *recorder) publisher(name string) outbox.Publisher {
	return outbox.PublisherFunc(func(ctx context.Context, e outbox.Event) error {
		if r.before != nil {
			r.before(name)
		}
		if r.sleep > 0 {
			time.Sleep(rand.N(r.sleep))
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		r.calls++
		if r.fail != nil {
			if err := r.fail(e); err != nil {
				return err
			}
		}
		r.events = append(r.events, e)
		r.by = append(r.by, name)
		return nil
	})
}

func (r *recorder) published() []outbox.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]outbox.Event(nil), r.events...)
}

func (r *recorder) setFail(f func(outbox.Event) error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fail = f
}

// env is a database with an outbox, a fake clock and a metrics registry.
type env struct {
	t     *testing.T
	pool  *pgxpool.Pool
	clock *clock.Fake
	reg   *prometheus.Registry
	m     *outbox.Metrics
}

func newEnv(t *testing.T) *env {
	t.Helper()
	pool := pgtest.NewPool(t)
	clk := clock.NewFake(t0)
	reg := prometheus.NewRegistry()
	return &env{t: t, pool: pool, clock: clk, reg: reg, m: outbox.NewMetrics(reg, pool, clk, nil)}
}

func (e *env) relay(pub outbox.Publisher, cfg outbox.RelayConfig) *outbox.Relay {
	e.t.Helper()
	return e.relayOn(e.pool, pub, cfg)
}

// relayOn is relay on db, a test double wrapping e.pool.
func (e *env) relayOn(db outbox.DB, pub outbox.Publisher, cfg outbox.RelayConfig) *outbox.Relay {
	e.t.Helper()
	r, err := outbox.NewRelay(outbox.RelayDeps{DB: db, Publisher: pub, Clock: e.clock, Metrics: e.m}, cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

// add writes events to the outbox, each in its own transaction, in order,
// as the payments service does (one transaction per state change).
func (e *env) add(typesByPayment ...string) []outbox.Event {
	e.t.Helper()
	var out []outbox.Event
	for _, spec := range typesByPayment {
		ev, err := e.write(spec)
		if err != nil {
			e.t.Fatal(err)
		}
		out = append(out, ev)
	}
	return out
}

// row is what the database holds about one outbox event.
type row struct {
	published, parked, claimed bool
	attempts                   int
	nextAttemptAt              time.Time
	lastError                  string
}

func (e *env) row(id string) row {
	e.t.Helper()
	var (
		r         row
		lastError *string
	)
	err := e.pool.QueryRow(context.Background(), `
		SELECT published_at IS NOT NULL, parked_at IS NOT NULL, claimed_until IS NOT NULL, attempts, next_attempt_at, last_error
		FROM outbox_events WHERE id = $1`, id).Scan(&r.published, &r.parked, &r.claimed, &r.attempts, &r.nextAttemptAt, &lastError)
	if err != nil {
		e.t.Fatal(err)
	}
	if lastError != nil {
		r.lastError = *lastError
	}
	return r
}

func (e *env) count(where string) int {
	e.t.Helper()
	var n int
	if err := e.pool.QueryRow(context.Background(), "SELECT count(*) FROM outbox_events WHERE "+where).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

// metric returns the value of a counter or gauge, or the sample count of a
// histogram; ok is false when the registry has no such metric.
func (e *env) metric(name string) (v float64, ok bool) {
	e.t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		e.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		m := mf.GetMetric()[0]
		switch mf.GetType() {
		case dto.MetricType_COUNTER:
			return m.GetCounter().GetValue(), true
		case dto.MetricType_GAUGE:
			return m.GetGauge().GetValue(), true
		case dto.MetricType_HISTOGRAM:
			return float64(m.GetHistogram().GetSampleCount()), true
		}
	}
	return 0, false
}

func (e *env) wantMetric(name string, want float64) {
	e.t.Helper()
	got, ok := e.metric(name)
	if !ok {
		e.t.Errorf("metric %s missing", name)
		return
	}
	if got != want {
		e.t.Errorf("%s = %v, want %v", name, got, want)
	}
}

func mustRunOnce(t *testing.T, r *outbox.Relay, want int) {
	t.Helper()
	n, err := r.RunOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if n != want {
		t.Fatalf("RunOnce published %d, want %d", n, want)
	}
}

// drain runs the relays at once, each in its own goroutine, pass after
// pass, until all is written (written is closed) and published, or timeout
// passed; it reports whether everything was published.
func (e *env) drain(timeout time.Duration, written <-chan struct{}, relays ...*outbox.Relay) bool {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, r := range relays {
		wg.Go(func() {
			for ctx.Err() == nil {
				n, err := r.RunOnce(ctx)
				if err != nil {
					e.t.Error(err)
					return
				}
				select {
				case <-written:
					if n == 0 && e.count("published_at IS NULL") == 0 {
						return
					}
				default:
				}
			}
		})
	}
	wg.Wait()
	return ctx.Err() == nil
}

func ids(events []outbox.Event) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = e.AggregateID + ":" + e.Type
	}
	return out
}

// TestRelayPublishesInOrderPerPayment: one pass publishes the first pending
// event of each payment and marks it; the next event of a payment goes out
// only in a later pass, after the one before it was acknowledged and marked.
func TestRelayPublishesInOrderPerPayment(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	events := e.add("pay_a:PaymentCreated", "pay_b:PaymentCreated", "pay_a:PaymentSucceeded", "pay_b:PaymentDeclined")
	rec := &recorder{}
	r := e.relay(rec.publisher("r1"), outbox.RelayConfig{})

	mustRunOnce(t, r, 2)
	if got := ids(rec.published()); fmt.Sprint(got) != "[pay_a:PaymentCreated pay_b:PaymentCreated]" {
		t.Fatalf("first pass published %v", got)
	}
	mustRunOnce(t, r, 2)
	mustRunOnce(t, r, 0)
	if got := ids(rec.published()); fmt.Sprint(got) != "[pay_a:PaymentCreated pay_b:PaymentCreated pay_a:PaymentSucceeded pay_b:PaymentDeclined]" {
		t.Fatalf("published %v", got)
	}
	for _, ev := range events {
		if r := e.row(ev.ID); !r.published || r.claimed || r.attempts != 1 {
			t.Errorf("event %s: %+v", ev.ID, r)
		}
	}
	// The published event is the stored one: same id (the message id
	// downstream), type, aggregate, time and payload.
	got := rec.published()[0]
	if got.ID != events[0].ID || got.AggregateType != "payment" || !got.OccurredAt.Equal(events[0].OccurredAt) ||
		!bytes.Contains(got.Payload, []byte(`"paymentId"`)) {
		t.Errorf("published %+v, stored %+v", got, events[0])
	}
}

// TestTwoRelaysPublishEveryRowOnce runs two relays at once, in real
// goroutines, over many payments with small batches: every row is published
// exactly once (no row skipped, none taken by both) and each payment's
// events go out in order.
func TestTwoRelaysPublishEveryRowOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var specs []string
	for i := range 60 {
		p := fmt.Sprintf("pay_%02d", i)
		specs = append(specs, p+":PaymentCreated")
	}
	for i := range 60 {
		p := fmt.Sprintf("pay_%02d", i)
		specs = append(specs, p+":PaymentSucceeded")
		if i%3 == 0 {
			specs = append(specs, p+":PaymentRefunded")
		}
	}
	events := e.add(specs...)
	// The first publish of each relay waits for the other's first publish:
	// both then hold a claim at the same time, whatever the scheduling.
	var (
		mu      sync.Mutex
		arrived = map[string]bool{}
		both    = make(chan struct{})
	)
	meet := func(name string) {
		mu.Lock()
		if !arrived[name] {
			arrived[name] = true
			if len(arrived) == 2 {
				close(both)
			}
		}
		mu.Unlock()
		select {
		case <-both:
		case <-time.After(10 * time.Second):
		}
	}
	rec := &recorder{sleep: time.Millisecond, before: meet}
	cfg := outbox.RelayConfig{BatchSize: 7}
	relays := []*outbox.Relay{e.relay(rec.publisher("r1"), cfg), e.relay(rec.publisher("r2"), cfg)}

	written := make(chan struct{})
	close(written)
	if !e.drain(20*time.Second, written, relays...) {
		t.Fatal("the relays did not finish in 20s")
	}

	published := rec.published()
	seen := map[string]int{}
	for _, ev := range published {
		seen[ev.ID]++
	}
	for _, ev := range events {
		if seen[ev.ID] != 1 {
			t.Errorf("event %s (%s) published %d times", ev.ID, ev.Type, seen[ev.ID])
		}
	}
	if len(published) != len(events) {
		t.Errorf("%d publishes for %d events", len(published), len(events))
	}
	if n := e.count("published_at IS NULL OR claimed_until IS NOT NULL"); n != 0 {
		t.Errorf("%d rows not marked published", n)
	}
	// Per payment, the order written is the order published.
	want := map[string][]string{}
	for _, ev := range events {
		want[ev.AggregateID] = append(want[ev.AggregateID], ev.Type)
	}
	got := map[string][]string{}
	for _, ev := range published {
		got[ev.AggregateID] = append(got[ev.AggregateID], ev.Type)
	}
	for p, w := range want {
		if fmt.Sprint(got[p]) != fmt.Sprint(w) {
			t.Errorf("payment %s: published %v, written %v", p, got[p], w)
		}
	}
	byRelay := map[string]int{}
	rec.mu.Lock()
	for _, name := range rec.by {
		byRelay[name]++
	}
	rec.mu.Unlock()
	t.Logf("published by relay: %v", byRelay)
	select {
	case <-both:
	default:
		t.Errorf("the two relays never published at the same time: %v", byRelay)
	}
}

// TestFailingPublisherParksAfterMaxAttempts: a row whose publish keeps
// failing is retried only after its backoff, and after MaxAttempts it is
// parked: kept, with its last error, counted, never retried by itself.
func TestFailingPublisherParksAfterMaxAttempts(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ev := e.add("pay_a:PaymentCreated")[0]
	rec := &recorder{fail: func(outbox.Event) error { return errors.New("broker says no") }}
	r := e.relay(rec.publisher("r1"), outbox.RelayConfig{MaxAttempts: 3, Backoff: time.Second, MaxBackoff: 4 * time.Second})

	for attempt := 1; attempt <= 3; attempt++ {
		mustRunOnce(t, r, 0)
		got := e.row(ev.ID)
		if got.attempts != attempt || got.published || got.claimed || !strings.Contains(got.lastError, "broker says no") {
			t.Fatalf("after attempt %d: %+v", attempt, got)
		}
		if attempt < 3 {
			// Backoff: 1s, then 2s, each jittered into [d/2, d].
			d := time.Second << (attempt - 1)
			wait := got.nextAttemptAt.Sub(e.clock.Now())
			if got.parked || wait < d/2 || wait > d {
				t.Fatalf("after attempt %d: parked %v, next attempt in %s, want in [%s, %s]", attempt, got.parked, wait, d/2, d)
			}
			mustRunOnce(t, r, 0) // not due yet: no attempt
			if got := e.row(ev.ID).attempts; got != attempt {
				t.Fatalf("retried before the backoff: attempts %d", got)
			}
			e.clock.Set(got.nextAttemptAt)
		}
	}
	if !e.row(ev.ID).parked {
		t.Fatal("not parked after 3 failed attempts")
	}
	e.wantMetric("paymentsapi_outbox_publish_failures_total", 3)
	e.wantMetric("paymentsapi_outbox_parked_total", 1)
	e.wantMetric("paymentsapi_outbox_parked_events", 1)
	e.wantMetric("paymentsapi_outbox_pending_events", 0)

	e.clock.Advance(time.Hour)
	mustRunOnce(t, r, 0)
	if got := e.row(ev.ID); got.attempts != 3 || !got.parked {
		t.Fatalf("a parked row was tried again: %+v", got)
	}
	if rec.calls != 3 {
		t.Fatalf("publisher called %d times, want 3", rec.calls)
	}

	// Once the cause is fixed, an operator unparks it and it goes out.
	rec.setFail(nil)
	if err := r.Unpark(context.Background(), ev.ID); err != nil {
		t.Fatal(err)
	}
	if err := r.Unpark(context.Background(), ev.ID); !errors.Is(err, outbox.ErrNotParked) {
		t.Fatalf("second Unpark: %v", err)
	}
	mustRunOnce(t, r, 1)
	e.wantMetric("paymentsapi_outbox_parked_events", 0)
}

// TestParkedEventHoldsBackItsPayment: a parked PaymentCreated keeps its
// PaymentSucceeded unpublished (and visible as pending), while other
// payments flow; after the unpark both go out, in order.
func TestParkedEventHoldsBackItsPayment(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	events := e.add("pay_a:PaymentCreated", "pay_b:PaymentCreated", "pay_a:PaymentSucceeded", "pay_b:PaymentSucceeded")
	rec := &recorder{fail: func(ev outbox.Event) error {
		if ev.AggregateID == "pay_a" {
			return errors.New("poison")
		}
		return nil
	}}
	r := e.relay(rec.publisher("r1"), outbox.RelayConfig{MaxAttempts: 1})

	mustRunOnce(t, r, 1) // pay_b's PaymentCreated; pay_a's parked
	mustRunOnce(t, r, 1) // pay_b's PaymentSucceeded
	e.clock.Advance(time.Hour)
	mustRunOnce(t, r, 0) // pay_a's PaymentSucceeded waits behind its parked PaymentCreated
	if got := e.row(events[2].ID); got.published || got.attempts != 0 {
		t.Fatalf("pay_a's PaymentSucceeded: %+v", got)
	}
	e.wantMetric("paymentsapi_outbox_parked_events", 1)
	e.wantMetric("paymentsapi_outbox_pending_events", 1)
	e.wantMetric("paymentsapi_outbox_oldest_pending_age_seconds", 3600)

	rec.setFail(nil)
	if err := r.Unpark(context.Background(), events[0].ID); err != nil {
		t.Fatal(err)
	}
	mustRunOnce(t, r, 1)
	mustRunOnce(t, r, 1)
	if got := ids(rec.published()); fmt.Sprint(got) != "[pay_b:PaymentCreated pay_b:PaymentSucceeded pay_a:PaymentCreated pay_a:PaymentSucceeded]" {
		t.Fatalf("published %v", got)
	}
}

var errCrash = errors.New("simulated crash")

// crashOn is an AfterPublish hook that crashes the relay after each publish
// of an event of aggregateID.
func crashOn(aggregateID string) func(context.Context, outbox.Event) error {
	return func(_ context.Context, ev outbox.Event) error {
		if ev.AggregateID == aggregateID {
			return errCrash
		}
		return nil
	}
}

// TestCrashBetweenPublishAndMarkRepublishes: a relay that dies after the
// broker took events and before the end of its pass marked them leaves the
// rows claimed, the one it published before the crash included; nobody
// publishes them while the claim holds, and once it runs out another relay
// publishes them again (the consumer's side of this is in package ledger),
// each alone: the dead claim made them suspects.
func TestCrashBetweenPublishAndMarkRepublishes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	events := e.add("pay_a:PaymentSucceeded", "pay_b:PaymentSucceeded")
	rec := &recorder{}
	cfg := outbox.RelayConfig{Lease: 30 * time.Second}
	crashing := cfg
	crashing.Hooks.AfterPublish = crashOn("pay_b")
	dying := e.relay(rec.publisher("dying"), crashing)
	if _, err := dying.RunOnce(context.Background()); !errors.Is(err, errCrash) {
		t.Fatalf("RunOnce = %v, want the crash", err)
	}
	for _, ev := range events {
		if got := e.row(ev.ID); got.published || !got.claimed || got.attempts != 1 {
			t.Fatalf("event %s after the crash: %+v", ev.AggregateID, got)
		}
	}

	survivor := e.relay(rec.publisher("survivor"), cfg)
	e.clock.Advance(29 * time.Second)
	mustRunOnce(t, survivor, 0) // the claim still holds
	e.clock.Advance(time.Second)
	mustRunOnce(t, survivor, 1) // it ran out: pay_a, a suspect, published again alone, and marked
	mustRunOnce(t, survivor, 1) // then pay_b
	for _, ev := range events {
		if got := e.row(ev.ID); !got.published || got.claimed || got.attempts != 2 {
			t.Fatalf("event %s after the second relay: %+v", ev.AggregateID, got)
		}
	}
	if got := ids(rec.published()); fmt.Sprint(got) != "[pay_a:PaymentSucceeded pay_b:PaymentSucceeded pay_a:PaymentSucceeded pay_b:PaymentSucceeded]" {
		t.Fatalf("published %v", got)
	}
	e.wantMetric("paymentsapi_outbox_published_total", 2) // only the marked publishes count
}

// TestClaimsRunningOutAreParked: a row whose claim keeps running out (a relay
// dying on it each time) is parked after MaxAttempts publishes, not retried
// for ever; the claim that gives up publishes nothing and takes its count
// back, so attempts shows the publishes started.
func TestClaimsRunningOutAreParked(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ev := e.add("pay_a:PaymentCreated")[0]
	rec := &recorder{}
	cfg := outbox.RelayConfig{MaxAttempts: 2, Lease: 30 * time.Second}
	crashing := cfg
	crashing.Hooks.AfterPublish = func(context.Context, outbox.Event) error { return errCrash }
	dying := e.relay(rec.publisher("dying"), crashing)
	for range 2 {
		if _, err := dying.RunOnce(context.Background()); !errors.Is(err, errCrash) {
			t.Fatalf("RunOnce = %v, want the crash", err)
		}
		e.clock.Advance(31 * time.Second)
	}
	mustRunOnce(t, e.relay(rec.publisher("r"), cfg), 0)
	if got := e.row(ev.ID); !got.parked || got.claimed || got.attempts != 2 || !strings.Contains(got.lastError, "gave up") {
		t.Fatalf("%+v", got)
	}
	if rec.calls != 2 {
		t.Fatalf("publisher called %d times, want 2: the claim that gave up published", rec.calls)
	}
	e.wantMetric("paymentsapi_outbox_parked_total", 1)
}

// TestSuspectIsPublishedAlone: a crash leaves an attempt counted on every
// row of the dead relay's claim, so a row that crashes the relay each time
// must not take its batch-mates to MaxAttempts with it. With MaxAttempts 2
// and one row of five crashing every publish (the rows before it published
// and never marked), the rows come back as suspects and each is published
// alone: only the crashing row is parked, the other four are published.
func TestSuspectIsPublishedAlone(t *testing.T) {
	t.Parallel()
	// With a BatchPublisher the first pass sends the whole batch before the
	// crash; the suspects must still be published one by one after it.
	for name, pub := range map[string]outbox.Publisher{"one by one": (&recorder{}).publisher("r1"), "in batches": &batcher{}} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			suspectIsPublishedAlone(t, pub)
		})
	}
}

func suspectIsPublishedAlone(t *testing.T, pub outbox.Publisher) {
	e := newEnv(t)
	events := e.add("pay_a:PaymentCreated", "pay_b:PaymentCreated", "pay_c:PaymentCreated", "pay_d:PaymentCreated", "pay_e:PaymentCreated")
	cfg := outbox.RelayConfig{MaxAttempts: 2, Lease: 30 * time.Second}
	cfg.Hooks.AfterPublish = crashOn("pay_c")
	r := e.relay(pub, cfg)
	crashes := 0
	for pass := 0; e.count("published_at IS NULL AND parked_at IS NULL") > 0; pass++ {
		if pass == 20 {
			t.Fatalf("rows still pending after %d passes", pass)
		}
		n, err := r.RunOnce(context.Background())
		switch {
		case errors.Is(err, errCrash):
			crashes++
			e.clock.Advance(31 * time.Second) // the dead claim runs out
		case err != nil:
			t.Fatal(err)
		case n == 0:
			e.clock.Advance(31 * time.Second)
		}
	}
	for _, ev := range events {
		got := e.row(ev.ID)
		if ev.AggregateID == "pay_c" {
			if !got.parked || got.attempts != 2 || !strings.Contains(got.lastError, "gave up") {
				t.Errorf("pay_c, the crashing row: %+v; want it parked after 2 attempts", got)
			}
			continue
		}
		if !got.published || got.parked {
			t.Errorf("event %s, beside the crashing row: %+v; want it published", ev.AggregateID, got)
		}
	}
	if crashes != 2 {
		t.Errorf("%d crashes, want 2 (MaxAttempts)", crashes)
	}
}

// countingDB counts what a relay sends to the database. DB has no Begin, so
// each call is a transaction of its own (a batch one implicit transaction):
// the calls are the commits.
type countingDB struct {
	outbox.DB
	mu    sync.Mutex
	calls []string
}

func (c *countingDB) note(call string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, call)
}

func (c *countingDB) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	calls := c.calls
	c.calls = nil
	return calls
}

func (c *countingDB) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	c.note("Exec")
	return c.DB.Exec(ctx, sql, args...)
}

func (c *countingDB) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	c.note("Query")
	return c.DB.Query(ctx, sql, args...)
}

func (c *countingDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	c.note("QueryRow")
	return c.DB.QueryRow(ctx, sql, args...)
}

func (c *countingDB) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	c.note("SendBatch")
	return c.DB.SendBatch(ctx, b)
}

// TestPassCommitsTwiceWhateverItsSize (issue 8): a pass that publishes one
// row and a pass that publishes fifty each make two round trips, two
// commits: the claim, and the batch that marks what it published.
func TestPassCommitsTwiceWhateverItsSize(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	db := &countingDB{DB: e.pool}
	rec := &recorder{}
	r := e.relayOn(db, rec.publisher("r1"), outbox.RelayConfig{BatchSize: 50})
	for _, size := range []int{1, 50} {
		seedBacklog(t, e.pool, fmt.Sprintf("pay_%d_", size), size, t0.Add(-time.Second))
		mustRunOnce(t, r, size)
		if got := db.take(); fmt.Sprint(got) != "[Query SendBatch]" {
			t.Errorf("a pass of %d rows made the calls %v, want [Query SendBatch]: the claim and the end of the pass", size, got)
		}
	}
	if n := e.count("published_at IS NULL OR claimed_until IS NOT NULL OR attempts <> 1"); n != 0 {
		t.Errorf("%d rows not published once and marked", n)
	}
}

// TestShortClaimHandsBackTheRest: a pass only starts a publish while its
// claim has PublishTimeout left; the rest of the batch is handed back, with
// the attempt uncounted, for another pass to take at once.
func TestShortClaimHandsBackTheRest(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	events := e.add("pay_a:PaymentCreated", "pay_b:PaymentCreated", "pay_c:PaymentCreated")
	rec := &recorder{fail: func(outbox.Event) error {
		e.clock.Advance(25 * time.Second) // a slow broker
		return nil
	}}
	r := e.relay(rec.publisher("r1"), outbox.RelayConfig{Lease: 30 * time.Second, PublishTimeout: 10 * time.Second})
	mustRunOnce(t, r, 1)
	for _, ev := range events[1:] {
		if got := e.row(ev.ID); got.claimed || got.attempts != 0 || got.published {
			t.Fatalf("event %s not handed back: %+v", ev.AggregateID, got)
		}
	}
	mustRunOnce(t, r, 1)
}

// TestShutdownHandsBackTheClaim: when ctx ends during a pass, the claimed
// rows are handed back at once, their attempts uncounted.
func TestShutdownHandsBackTheClaim(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	events := e.add("pay_a:PaymentCreated", "pay_b:PaymentCreated")
	ctx, cancel := context.WithCancel(context.Background())
	pub := outbox.PublisherFunc(func(ctx context.Context, _ outbox.Event) error {
		cancel()
		return ctx.Err()
	})
	r := e.relay(pub, outbox.RelayConfig{})
	if _, err := r.RunOnce(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("RunOnce = %v", err)
	}
	for _, ev := range events {
		if got := e.row(ev.ID); got.claimed || got.attempts != 0 || got.published || got.lastError != "" {
			t.Fatalf("event %s: %+v", ev.AggregateID, got)
		}
	}
}

// TestMetricsFollowTheBacklog: the pending count and the oldest pending age
// rise with unpublished events and fall when the relay publishes them; the
// published counter and the lag histogram count what it published.
func TestMetricsFollowTheBacklog(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.wantMetric("paymentsapi_outbox_pending_events", 0)
	e.wantMetric("paymentsapi_outbox_oldest_pending_age_seconds", 0)
	e.add("pay_a:PaymentCreated", "pay_b:PaymentCreated")
	e.clock.Advance(30 * time.Second)
	e.add("pay_a:PaymentSucceeded")
	e.clock.Advance(15 * time.Second)
	e.wantMetric("paymentsapi_outbox_pending_events", 3)
	e.wantMetric("paymentsapi_outbox_oldest_pending_age_seconds", 45)

	rec := &recorder{}
	r := e.relay(rec.publisher("r1"), outbox.RelayConfig{})
	mustRunOnce(t, r, 2)
	e.wantMetric("paymentsapi_outbox_pending_events", 1)
	e.wantMetric("paymentsapi_outbox_oldest_pending_age_seconds", 15)
	mustRunOnce(t, r, 1)
	e.wantMetric("paymentsapi_outbox_pending_events", 0)
	e.wantMetric("paymentsapi_outbox_oldest_pending_age_seconds", 0)
	e.wantMetric("paymentsapi_outbox_published_total", 3)
	e.wantMetric("paymentsapi_outbox_publish_lag_seconds", 3)

	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "paymentsapi_outbox_publish_lag_seconds" {
			if sum := mf.GetMetric()[0].GetHistogram().GetSampleSum(); sum != 45+45+15 {
				t.Errorf("lag sum = %v, want 105", sum)
			}
		}
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) > 0 {
				t.Errorf("metric %s has labels %v: none expected", mf.GetName(), m.GetLabel())
			}
		}
	}
}

// TestRunPublishesUntilStopped: Run keeps publishing, in real time, until
// its context ends.
func TestRunPublishesUntilStopped(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.add("pay_a:PaymentCreated", "pay_a:PaymentSucceeded")
	rec := &recorder{}
	r := e.relay(rec.publisher("r1"), outbox.RelayConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx, 10*time.Millisecond) }()
	deadline := time.Now().Add(10 * time.Second)
	for e.count("published_at IS NULL") > 0 {
		if time.Now().After(deadline) {
			t.Fatal("Run did not publish in 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	e.add("pay_b:PaymentCreated") // picked up on a later tick
	for e.count("published_at IS NULL") > 0 {
		if time.Now().After(deadline) {
			t.Fatal("Run did not publish the later event in 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
}

func TestLogPublisherWritesJSONLines(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	p := outbox.NewLogPublisher(&buf)
	ev, err := outbox.NewEvent(context.Background(), "PaymentSucceeded", "payment", "pay_a", map[string]string{"paymentId": "pay_a"}, t0)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := p.Publish(context.Background(), ev); err != nil {
			t.Fatal(err)
		}
	}
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines: %q", len(lines), buf.String())
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &got); err != nil {
		t.Fatal(err)
	}
	if got["eventId"] != ev.ID || got["type"] != "PaymentSucceeded" || got["aggregateId"] != "pay_a" {
		t.Fatalf("line: %s", lines[0])
	}
}

func TestNewRelayRejectsPublishTimeoutOverLease(t *testing.T) {
	t.Parallel()
	_, err := outbox.NewRelay(outbox.RelayDeps{DB: (*pgxpool.Pool)(nil), Publisher: outbox.NewLogPublisher(&bytes.Buffer{}), Clock: clock.System{}},
		outbox.RelayConfig{Lease: time.Second, PublishTimeout: 2 * time.Second})
	if err == nil {
		t.Fatal("accepted a publish timeout longer than the lease")
	}
}
