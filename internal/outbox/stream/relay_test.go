package stream_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/outbox"
	"github.com/paymentsapi/paymentsapi/internal/outbox/stream"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
	"github.com/paymentsapi/paymentsapi/internal/testio"
)

// broker records what was published, in the order it was accepted, and
// fails the publishes that fail says to.
type broker struct {
	mu        sync.Mutex
	accepted  []outbox.Event
	attempts  map[string]int
	fail      func(e outbox.Event, attempt int) error // nil: accept all
	broken    sync.Map                                // event ids refused as too large until removed
	published chan struct{}
}

func newBroker() *broker {
	return &broker{attempts: map[string]int{}, published: make(chan struct{}, 1000)}
}

func (b *broker) Publish(_ context.Context, e outbox.Event) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.attempts[e.ID]++
	if _, ok := b.broken.Load(e.ID); ok {
		return errors.New("message too large")
	}
	if b.fail != nil {
		if err := b.fail(e, b.attempts[e.ID]); err != nil {
			return err
		}
	}
	b.accepted = append(b.accepted, e)
	b.published <- struct{}{}
	return nil
}

// waitFor waits until n events were accepted in all.
func (b *broker) waitFor(t *testing.T, n int) []outbox.Event {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		b.mu.Lock()
		got := slices.Clone(b.accepted)
		b.mu.Unlock()
		if len(got) >= n {
			return got
		}
		select {
		case <-b.published:
		case <-deadline:
			t.Fatalf("%d events accepted, want %d", len(got), n)
		}
	}
}

func (e *env) run(t *testing.T, pub outbox.Publisher, cfg stream.RelayConfig) (stop func()) {
	t.Helper()
	cfg.Slot = e.slot
	cfg.Backoff, cfg.MaxBackoff, cfg.Standby = 10*time.Millisecond, 50*time.Millisecond, 50*time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		stream.NewRelay(stream.RelayDeps{ConnString: e.url, DB: e.pool, Publisher: pub, Clock: clock.System{}, Metrics: e.metrics}, cfg).Run(ctx)
	}()
	stop = func() { cancel(); <-done }
	t.Cleanup(stop)
	return stop
}

// createSlot makes the slot exist, so that what is committed next waits in
// it for the relay.
func (e *env) createSlot(t *testing.T) {
	t.Helper()
	if err := e.open(t, nil).Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func byAggregate(events []outbox.Event) map[string][]string {
	out := map[string][]string{}
	for _, e := range events {
		out[e.AggregateID] = append(out[e.AggregateID], e.Type)
	}
	return out
}

// TestTheRelayPublishesEveryEventInCommitOrder: every event is published
// once, each payment's in the order they committed.
func TestTheRelayPublishesEveryEventInCommitOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.createSlot(t)
	e.commit(t, e.event("pay_a", "PaymentCreated"))
	e.commit(t, e.event("pay_b", "PaymentCreated"), e.event("pay_b", "PaymentSucceeded"))
	e.commit(t, e.event("pay_a", "PaymentSucceeded"))
	b := newBroker()
	e.run(t, b, stream.RelayConfig{})
	e.commit(t, e.event("pay_a", "RefundCreated"))

	got := b.waitFor(t, 5)
	want := map[string][]string{
		"pay_a": {"PaymentCreated", "PaymentSucceeded", "RefundCreated"},
		"pay_b": {"PaymentCreated", "PaymentSucceeded"},
	}
	if fmt.Sprint(byAggregate(got)) != fmt.Sprint(want) {
		t.Fatalf("published %v, want %v", byAggregate(got), want)
	}
}

// TestAFailedEventHoldsBackTheLaterEventsOfItsPayment: an event whose
// publish fails is retried, and no later event of its payment is published
// before it, although both came in one batch (one wave each, while pay_b's
// event goes out with the first); every event is accepted once.
func TestAFailedEventHoldsBackTheLaterEventsOfItsPayment(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.createSlot(t)
	created := e.event("pay_a", "PaymentCreated")
	e.commit(t, created)
	e.commit(t, e.event("pay_b", "PaymentCreated"))
	e.commit(t, e.event("pay_a", "PaymentSucceeded"))
	b := newBroker()
	b.fail = func(ev outbox.Event, attempt int) error {
		if ev.ID == created.ID && attempt <= 2 {
			return errors.New("message rejected")
		}
		return nil
	}
	e.run(t, b, stream.RelayConfig{Linger: time.Second}) // the three transactions in one batch

	got := b.waitFor(t, 3)
	if want := []string{"PaymentCreated", "PaymentSucceeded"}; !slices.Equal(byAggregate(got)["pay_a"], want) {
		t.Fatalf("pay_a's events published as %v, want %v", byAggregate(got)["pay_a"], want)
	}
	if b.attempts[created.ID] != 3 || len(got) != 3 {
		t.Errorf("PaymentCreated tried %d times (want 3), %d accepted (want 3)", b.attempts[created.ID], len(got))
	}
}

// TestARelayThatStopsBeforeConfirmingLeavesItsEventsToTheNext: a relay that
// published a batch and stopped before confirming it (a crash) leaves the
// slot where it was: the next relay publishes the batch again.
func TestARelayThatStopsBeforeConfirmingLeavesItsEventsToTheNext(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.createSlot(t)
	ev := e.event("pay_a", "PaymentCreated")
	e.commit(t, ev)

	first := newBroker()
	crashed := make(chan struct{})
	var once sync.Once
	stop := e.run(t, first, stream.RelayConfig{AfterPublish: func(context.Context, []outbox.Event) error {
		once.Do(func() { close(crashed) })
		return errors.New("crash before the confirmation")
	}})
	first.waitFor(t, 1)
	<-crashed
	stop()

	second := newBroker()
	e.run(t, second, stream.RelayConfig{})
	if got := second.waitFor(t, 1); got[0].ID != ev.ID {
		t.Fatalf("the next relay published %s first, want %s again", got[0].ID, ev.ID)
	}
}

// TestOneRelayReadsAtATime: of two relays, one reads the slot and the
// other stands by; each event is published once, and when the reader stops
// the other takes over.
func TestOneRelayReadsAtATime(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.createSlot(t)
	b := newBroker()
	stopFirst := e.run(t, b, stream.RelayConfig{})
	e.commit(t, e.event("pay_a", "PaymentCreated"))
	b.waitFor(t, 1)
	e.run(t, b, stream.RelayConfig{})
	for i := range 20 {
		e.commit(t, e.event(fmt.Sprintf("pay_%d", i), "PaymentCreated"))
	}
	b.waitFor(t, 21)
	time.Sleep(200 * time.Millisecond) // room for a second publish of any of them
	b.mu.Lock()
	for id, n := range b.attempts {
		if n != 1 {
			t.Errorf("event %s published %d times while two relays ran, want once (one reader at a time)", id, n)
		}
	}
	b.mu.Unlock()
	stopFirst()
	e.commit(t, e.event("pay_z", "PaymentCreated"))
	for _, ev := range b.waitFor(t, 22) {
		if ev.AggregateID == "pay_z" {
			return // published by the relay that stood by
		}
	}
	t.Fatal("pay_z's event was not published after the first relay stopped")
}

// TestAFirstStartPublishesWhatCameBeforeTheSlot: events committed before
// the slot existed are not in its stream; the relay that creates it
// publishes them first, in order, then the stream's.
func TestAFirstStartPublishesWhatCameBeforeTheSlot(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.commit(t, e.event("pay_a", "PaymentCreated"))
	e.commit(t, e.event("pay_a", "PaymentSucceeded"))
	b := newBroker()
	e.run(t, b, stream.RelayConfig{})
	e.commit(t, e.event("pay_a", "RefundCreated"))
	got := b.waitFor(t, 3)
	if want := []string{"PaymentCreated", "PaymentSucceeded", "RefundCreated"}; !slices.Equal(byAggregate(got)["pay_a"], want) || len(got) != 3 {
		t.Fatalf("published %v, want %v once each", byAggregate(got), want)
	}
}

// TestAfterAFailoverTheNewSlotStartsNearThePosition: a promoted standby has
// no slot. The relay that creates it there publishes again what was
// written since a little before its recorded position, so that what the
// lost slot had not sent is published; what is older is not.
func TestAfterAFailoverTheNewSlotStartsNearThePosition(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	now := time.Now().UTC()
	old := e.event("pay_old", "PaymentCreated")
	old.OccurredAt = now.Add(-time.Hour)
	e.commit(t, old)
	first := newBroker()
	stop := e.run(t, first, stream.RelayConfig{})
	first.waitFor(t, 1) // old, caught up (no position yet)
	caughtUp := e.waitCaughtUp(t)
	published := e.event("pay_a", "PaymentCreated")
	published.OccurredAt = now
	e.commit(t, published)
	e.waitRecorded(t, caughtUp) // published through the stream
	stop()
	missed := e.event("pay_a", "PaymentSucceeded")
	missed.OccurredAt = time.Now().UTC()
	e.commit(t, missed)
	// The failover: the new primary has the rows, not the slot. (The
	// stopped relay's sender lets go of the slot a moment after.)
	eventually(t, "the slot dropped", func() (bool, string) {
		_, err := e.pool.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, e.slot)
		return err == nil, fmt.Sprint(err)
	})

	second := newBroker()
	e.run(t, second, stream.RelayConfig{})
	later := e.event("pay_a", "RefundCreated")
	later.OccurredAt = time.Now().UTC() // the catch-up chooses by created_at: these are written now
	e.commit(t, later)
	got := byAggregate(second.waitFor(t, 3))
	if want := []string{"PaymentCreated", "PaymentSucceeded", "RefundCreated"}; !slices.Equal(got["pay_a"], want) {
		t.Errorf("after the failover pay_a's events went out as %v, want %v (the first again, at least once)", got["pay_a"], want)
	}
	if len(got["pay_old"]) != 0 {
		t.Errorf("an event from long before the position was published again: %v", got["pay_old"])
	}
}

// parkedRows lists outbox_parked as "event: failed after N" or "event:
// waits for event", in seq order.
func (e *env) parkedRows(t *testing.T) []string {
	t.Helper()
	rows, err := e.pool.Query(context.Background(), `
		SELECT event_id::text, attempts, coalesce(waits_for::text, '') FROM outbox_parked ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	var id, waits string
	var attempts int
	if _, err := pgx.ForEachRow(rows, []any{&id, &attempts, &waits}, func() error {
		if waits != "" {
			out = append(out, id+": waits for "+waits)
		} else {
			out = append(out, fmt.Sprintf("%s: failed after %d", id, attempts))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func (e *env) waitParked(t *testing.T, want []string) {
	t.Helper()
	eventually(t, fmt.Sprintf("parked, want %v", want), func() (bool, string) {
		got := e.parkedRows(t)
		return slices.Equal(got, want), fmt.Sprint(got)
	})
}

// TestAnEventThatKeepsFailingIsParkedWithItsPaymentsLaterOnes: after
// MaxAttempts failed publishes an event is parked, the later events of its
// payment are parked behind it (those the stream brings later too), other
// payments' events go on, and after a restart its payment is still held.
// Unparked, its events go out in order, and the payment's next event goes
// out after them.
func TestAnEventThatKeepsFailingIsParkedWithItsPaymentsLaterOnes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.createSlot(t)
	poison, after := e.event("pay_a", "PaymentCreated"), e.event("pay_a", "PaymentSucceeded")
	e.commit(t, poison)
	e.commit(t, after)
	e.commit(t, e.event("pay_b", "PaymentCreated"))
	b := newBroker()
	b.broken.Store(poison.ID, true)
	cfg := stream.RelayConfig{SendConfig: outbox.SendConfig{MaxAttempts: 3, ReleaseInterval: 20 * time.Millisecond}}
	reg := prometheus.NewRegistry()
	e.metrics = outbox.NewMetrics(reg)
	stop := e.run(t, b, cfg)
	b.waitFor(t, 1)
	e.waitParked(t, []string{poison.ID + ": failed after 3", after.ID + ": waits for " + poison.ID})
	want := map[string]float64{"published": 1, "failures": 3, "parked": 1, "broker_unavailable": 0}
	if got := counters(t, reg); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("metrics = %v, want %v", got, want)
	}
	listed, err := outbox.Parked(context.Background(), e.pool, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(listed) != 2 || listed[0].ID != poison.ID || listed[0].LastError != "message too large" || listed[0].Attempts != 3 ||
		listed[1].ID != after.ID || listed[1].WaitsFor != poison.ID || listed[1].Type != "PaymentSucceeded" || listed[1].Released {
		t.Errorf("an operator sees %+v, want the failed event with its cause, then the one waiting for it", listed)
	}

	stop() // a restart: the payment stays held
	e.run(t, b, cfg)
	refund := e.event("pay_a", "RefundCreated")
	e.commit(t, refund)
	e.commit(t, e.event("pay_c", "PaymentCreated"))
	b.waitFor(t, 2) // pay_b's, pay_c's
	e.waitParked(t, []string{poison.ID + ": failed after 3", after.ID + ": waits for " + poison.ID, refund.ID + ": waits for " + poison.ID})

	b.broken.Delete(poison.ID) // the cause fixed
	if err := outbox.Unpark(context.Background(), e.pool, after.ID, time.Now()); err != nil {
		t.Fatal(err)
	}
	e.waitParked(t, nil)
	e.commit(t, e.event("pay_a", "RefundSucceeded"))
	got := b.waitFor(t, 6)
	if want := []string{"PaymentCreated", "PaymentSucceeded", "RefundCreated", "RefundSucceeded"}; !slices.Equal(byAggregate(got)["pay_a"], want) {
		t.Fatalf("pay_a's events went out as %v, want %v", byAggregate(got)["pay_a"], want)
	}
	if err := outbox.Unpark(context.Background(), e.pool, poison.ID, time.Now()); !errors.Is(err, outbox.ErrNotParked) {
		t.Errorf("unpark of a published event: %v, want ErrNotParked", err)
	}
}

// TestABrokerOutageParksNothing: failures of the broker as a whole are
// retried without counting, however many.
func TestABrokerOutageParksNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.createSlot(t)
	e.commit(t, e.event("pay_a", "PaymentCreated"))
	e.commit(t, e.event("pay_a", "PaymentSucceeded"))
	b := newBroker()
	reg := prometheus.NewRegistry()
	e.metrics = outbox.NewMetrics(reg)
	downMeanwhile := -1.0
	b.fail = func(_ outbox.Event, attempt int) error {
		if attempt == 3 { // two failed rounds behind
			var m dto.Metric
			if err := e.metrics.BrokerUnavailable.Write(&m); err == nil {
				downMeanwhile = m.GetGauge().GetValue()
			}
		}
		if attempt <= 5 {
			return fmt.Errorf("nats: no responders: %w", outbox.ErrBrokerUnavailable)
		}
		return nil
	}
	e.run(t, b, stream.RelayConfig{SendConfig: outbox.SendConfig{MaxAttempts: 2}})
	got := b.waitFor(t, 2)
	if want := []string{"PaymentCreated", "PaymentSucceeded"}; !slices.Equal(byAggregate(got)["pay_a"], want) {
		t.Fatalf("published %v, want %v", byAggregate(got)["pay_a"], want)
	}
	if rows := e.parkedRows(t); len(rows) != 0 {
		t.Errorf("parked during an outage: %v", rows)
	}
	b.mu.Lock()
	if downMeanwhile != 1 {
		t.Errorf("paymentsapi_outbox_broker_unavailable was %v during the outage, want 1", downMeanwhile)
	}
	b.mu.Unlock()
	// The gauge goes back to 0 once the relay is back from the publish
	// the broker accepted, a moment after the broker recorded it.
	want := map[string]float64{"published": 2, "failures": 0, "parked": 0, "broker_unavailable": 0}
	testio.Eventually(t, "the relay's counters after the outage", 10*time.Second, func() (bool, string) {
		got := counters(t, reg)
		return fmt.Sprint(got) == fmt.Sprint(want), fmt.Sprintf("metrics = %v, want %v", got, want)
	})
}

// counters reads the relay's counters and broker gauge from reg.
func counters(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		m := mf.GetMetric()[0]
		switch name := strings.TrimPrefix(mf.GetName(), "paymentsapi_outbox_"); name {
		case "published_total", "publish_failures_total", "parked_total":
			got[strings.TrimSuffix(strings.TrimPrefix(name, "publish_"), "_total")] = m.GetCounter().GetValue()
		case "broker_unavailable":
			got[name] = m.GetGauge().GetValue()
		}
	}
	return got
}

// TestRunOncePublishesWhatWasCommittedBeforeIt: each call publishes what
// was committed before it, the first one catching up what came before the
// slot, and returns how many.
func TestRunOncePublishesWhatWasCommittedBeforeIt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	b := newBroker()
	r := stream.NewRelay(stream.RelayDeps{ConnString: e.url, DB: e.pool, Publisher: b, Clock: clock.System{}}, stream.RelayConfig{Options: stream.Options{Slot: e.slot}})
	defer r.Close(ctx)
	e.commit(t, e.event("pay_a", "PaymentCreated"))
	for i, want := range []int{1, 0, 2} {
		if i == 2 {
			e.commit(t, e.event("pay_a", "PaymentSucceeded"))
			e.commit(t, e.event("pay_b", "PaymentCreated"))
		}
		n, err := r.RunOnce(ctx)
		if err != nil || n != want {
			t.Fatalf("call %d: published %d (%v), want %d", i+1, n, err, want)
		}
	}
	if got := byAggregate(b.accepted); fmt.Sprint(got) != fmt.Sprint(map[string][]string{"pay_a": {"PaymentCreated", "PaymentSucceeded"}, "pay_b": {"PaymentCreated"}}) {
		t.Errorf("published %v", got)
	}
}

// TestACatchUpCutShortIsRunAgainAndNobodyStreamsMeanwhile: a relay that
// created the slot and died (here: stopped) during its catch-up leaves the
// slot marked. While it catches up, another relay does not read the slot;
// once it is gone, the other drops the slot, creates it again and catches
// up what came before it, then the stream's events, in order.
func TestACatchUpCutShortIsRunAgainAndNobodyStreamsMeanwhile(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.commit(t, e.event("pay_a", "PaymentCreated"))
	down := newBroker()
	down.fail = func(outbox.Event, int) error {
		return fmt.Errorf("no responders: %w", outbox.ErrBrokerUnavailable)
	}
	stopFirst := e.run(t, down, stream.RelayConfig{})
	eventually(t, "the first relay tried to publish its catch-up", func() (bool, string) {
		down.mu.Lock()
		defer down.mu.Unlock()
		return len(down.attempts) > 0, "it never tried"
	})
	second := newBroker()
	e.run(t, second, stream.RelayConfig{})
	e.commit(t, e.event("pay_a", "PaymentSucceeded"))
	time.Sleep(300 * time.Millisecond)
	second.mu.Lock()
	early := len(second.accepted)
	second.mu.Unlock()
	if early != 0 {
		t.Fatalf("the second relay published %d events while the first was catching up", early)
	}
	stopFirst()
	got := second.waitFor(t, 2)
	if want := []string{"PaymentCreated", "PaymentSucceeded"}; !slices.Equal(byAggregate(got)["pay_a"], want) {
		t.Fatalf("after the first relay died catching up, published %v, want %v", byAggregate(got)["pay_a"], want)
	}
}

// TestAnEventThatCannotBeReadStopsTheStreamBeforeIt: a row the reader
// cannot decode, in the middle of a transaction, is neither skipped nor
// confirmed past: nothing after it is published.
func TestAnEventThatCannotBeReadStopsTheStreamBeforeIt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.createSlot(t)
	first := e.event("pay_a", "PaymentCreated")
	e.commit(t, first)
	tx := e.begin(t, e.event("pay_b", "PaymentCreated"))
	if _, err := tx.Exec(context.Background(), `
		INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload, created_at, next_attempt_at)
		VALUES (gen_random_uuid(), 'payment', 'pay_bc', 'PaymentCreated', '{}', '0044-03-15 00:00:00+00 BC', now())`); err != nil {
		t.Fatal(err)
	}
	b := newBroker()
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	after := e.event("pay_c", "PaymentCreated")
	e.commit(t, after)
	e.run(t, b, stream.RelayConfig{Linger: time.Second})
	b.waitFor(t, 1)
	time.Sleep(500 * time.Millisecond)
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.accepted) != 1 || b.accepted[0].ID != first.ID {
		t.Fatalf("published %v, want only %s: nothing from the transaction that cannot be read, nor after it", byAggregate(b.accepted), first.ID)
	}
}

// TestAParkedEventSentAgainKeepsItsRecord: after a relay died between
// parking an event and confirming it, the stream sends the event and the
// one behind it again: the record keeps its cause, and an operator's
// release given meanwhile is not undone.
func TestAParkedEventSentAgainKeepsItsRecord(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.createSlot(t)
	poison, after := e.event("pay_a", "PaymentCreated"), e.event("pay_a", "PaymentSucceeded")
	e.commit(t, poison, after)
	b := newBroker()
	b.broken.Store(poison.ID, true)
	crash := func(context.Context, []outbox.Event) error { return errors.New("crash before the confirmation") }
	stop := e.run(t, b, stream.RelayConfig{SendConfig: outbox.SendConfig{MaxAttempts: 2}, AfterPublish: crash, Standby: time.Hour})
	want := []string{poison.ID + ": failed after 2", after.ID + ": waits for " + poison.ID}
	e.waitParked(t, want)
	time.Sleep(300 * time.Millisecond) // the relay reconnects, is sent both again, and crashes again
	stop()
	e.waitParked(t, want)
	var cause string
	if err := e.pool.QueryRow(context.Background(), `SELECT coalesce(last_error, '') FROM outbox_parked WHERE event_id = $1`, poison.ID).Scan(&cause); err != nil || cause != "message too large" {
		t.Fatalf("the parked event's cause = %q (%v), want it kept", cause, err)
	}

	b.broken.Delete(poison.ID)
	if err := outbox.Unpark(context.Background(), e.pool, poison.ID, time.Now()); err != nil {
		t.Fatal(err)
	}
	e.run(t, b, stream.RelayConfig{SendConfig: outbox.SendConfig{MaxAttempts: 2, ReleaseInterval: 20 * time.Millisecond}})
	e.waitParked(t, nil)
	got := byAggregate(b.waitFor(t, 2))["pay_a"]
	if len(got) < 2 || got[0] != "PaymentCreated" || got[1] != "PaymentSucceeded" {
		t.Fatalf("pay_a's events went out as %v, want PaymentCreated first", got)
	}
}

// waitCaughtUp waits until the relay has created its slot and published
// its catch-up, so that what is committed next goes through the stream, and
// returns the position the catch-up recorded.
func (e *env) waitCaughtUp(t *testing.T) time.Time {
	t.Helper()
	var at time.Time
	eventually(t, "the relay's catch-up ended", func() (bool, string) {
		err := e.pool.QueryRow(context.Background(), `
			SELECT committed_at FROM outbox_stream_positions WHERE slot = $1 AND NOT catching_up AND committed_at IS NOT NULL`,
			e.slot).Scan(&at)
		return err == nil, fmt.Sprint(err)
	})
	return at
}

// waitRecorded waits until the relay records a position past since (the
// catch-up's): only a transaction confirmed through the stream moves it.
func (e *env) waitRecorded(t *testing.T, since time.Time) {
	t.Helper()
	eventually(t, fmt.Sprintf("a position recorded past the catch-up's %v", since), func() (bool, string) {
		var ok bool
		err := e.pool.QueryRow(context.Background(), `
			SELECT EXISTS (SELECT FROM outbox_stream_positions WHERE slot = $1 AND committed_at > $2)`,
			e.slot, since).Scan(&ok)
		return err == nil && ok, fmt.Sprint(err)
	})
}

// A new slot's catch-up (first start, or after a failover) reads the
// events since the margin before the position through the event log's
// index, a range per tenant: not the whole outbox, which is kept as long as
// the event log. Here 40,000 older events of one tenant surround 12 recent
// ones, of that tenant or of three (the catch-up skips from one tenant to
// the next). With one tenant, as in a service with one merchant, the
// planner, not knowing the position, guessed a third of the tenant's
// events and found it cheaper to read the whole table (make bench
// ARGS=-growth: a 2.4 GB outbox read once for its tenant and once for the
// end of the tenant list). The events are chosen as the relay chooses them
// (chooseCatchUp, in a transaction of its own), and that transaction scans
// no table whole; the statement reads at most a few rows beyond its events
// under either plan a prepared statement may get.
func TestACatchUpReadsOnlyTheMinutesItNeeds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name          string
		recentTenant  string // SQL of a recent event's tenant, by n
		recentTenants int
	}{
		{"one tenant", "'t0'", 1},
		{"three tenants", "'t' || n % 3", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.NewPool(t)
			ctx := context.Background()
			if _, err := pool.Exec(ctx, `
				INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload, created_at, next_attempt_at)
				SELECT gen_random_uuid(), 'payment', 'pay_' || n, 'PaymentCreated',
				       CASE WHEN n % 11 = 0 THEN '{}'::jsonb ELSE jsonb_build_object('tenantId', 't0', 'body', repeat('x', 450)) END,
				       now() - interval '1 day' + (n * 7919 % 40000) * interval '2 s', now() - interval '1 day'
				FROM generate_series(1, 40000) n;
				INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload, created_at, next_attempt_at)
				SELECT gen_random_uuid(), 'payment', 'pay_new' || n, 'PaymentCreated',
				       CASE WHEN n > 10 THEN '{}'::jsonb ELSE jsonb_build_object('tenantId', `+tc.recentTenant+`) END,
				       now() - interval '1 minute', now()
				FROM generate_series(1, 12) n;
				INSERT INTO outbox_stream_positions (slot, committed_at, updated_at) VALUES ('s', now(), now());
				ANALYZE outbox_events`); err != nil {
				t.Fatal(err)
			}
			var (
				ids   []string
				whole int64
			)
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				var err error
				if ids, err = stream.ChooseCatchUp(ctx, tx, "s"); err != nil {
					return err
				}
				// The transaction's own count of scans that read outbox_events
				// whole (a plan node never run is not counted).
				return tx.QueryRow(ctx, `SELECT COALESCE(sum(seq_scan), 0) FROM pg_stat_xact_user_tables
					WHERE relname = 'outbox_events'`).Scan(&whole)
			})
			if err != nil {
				t.Fatal(err)
			}
			var recent, tenants int
			if err := pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT payload->>'tenantId') FROM outbox_events
				WHERE id::text = ANY ($1) AND aggregate_id LIKE 'pay_new%'`, ids).Scan(&recent, &tenants); err != nil {
				t.Fatal(err)
			}
			if len(ids) != 12 || recent != 12 || tenants != tc.recentTenants {
				t.Fatalf("caught up %d events, %d of them recent, of %d tenants: want the 12 recent ones, of %d",
					len(ids), recent, tenants, tc.recentTenants)
			}
			if whole != 0 {
				t.Errorf("the catch-up read the outbox whole %d times", whole)
			}
			margin := strconv.FormatInt(stream.CatchupMargin.Microseconds(), 10)
			pgtest.ReadsAtMostUnder(t, pool, stream.CatchUpPlanning, 100, "text, bigint", stream.CatchUpSQL, "s", margin)
		})
	}
}
