package stream_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/outbox"
	"github.com/paymentsapi/paymentsapi/internal/outbox/stream"
)

// broker records what was published, in the order it was accepted, and
// fails the publishes that fail says to.
type broker struct {
	mu        sync.Mutex
	accepted  []outbox.Event
	attempts  map[string]int
	fail      func(e outbox.Event, attempt int) error // nil: accept all
	published chan struct{}
}

func newBroker() *broker {
	return &broker{attempts: map[string]int{}, published: make(chan struct{}, 1000)}
}

func (b *broker) Publish(_ context.Context, e outbox.Event) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.attempts[e.ID]++
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
		stream.NewRelay(e.url, pub, clock.System{}, nil, cfg).Run(ctx)
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
