package stream_test

import (
	"context"
	"slices"
	"testing"

	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/outbox/stream"
)

// An operator's replay publishes the events again, through the running
// relay, where the stream has it: after what committed before the replay,
// and a payment's events in the order they were written, whatever the
// order asked. An id the outbox does not hold is named back, and asks
// nothing.
func TestAReplayPublishesTheEventsAgainInCommitOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	e.createSlot(t)
	created, succeeded := e.event("pay_a", "PaymentCreated"), e.event("pay_a", "PaymentSucceeded")
	e.commit(t, created, succeeded)
	b := newBroker()
	r := stream.NewRelay(stream.RelayDeps{ConnString: e.url, DB: e.pool, Publisher: b, Clock: clock.System{}},
		stream.RelayConfig{Options: stream.Options{Slot: e.slot}})
	t.Cleanup(func() { r.Close(context.Background()) })
	if n, err := r.RunOnce(ctx); err != nil || n != 2 {
		t.Fatalf("RunOnce: %d, %v; want 2", n, err)
	}

	later := e.event("pay_b", "PaymentCreated")
	e.commit(t, later)
	unknown := "01900000-0000-7000-8000-999999999999"
	missing, err := stream.Replay(ctx, e.pool, []string{succeeded.ID, unknown, created.ID})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(missing, []string{unknown}) {
		t.Errorf("Replay named %v as missing, want only %s", missing, unknown)
	}
	if n, err := r.RunOnce(ctx); err != nil || n != 3 {
		t.Fatalf("RunOnce after the replay: %d, %v; want 3 (the later event, then the two replayed)", n, err)
	}
	var got []string
	for _, ev := range b.waitFor(t, 5)[2:] {
		got = append(got, ev.ID)
	}
	if want := []string{later.ID, created.ID, succeeded.ID}; !slices.Equal(got, want) {
		t.Errorf("published %v after the first pass, want %v: the later event, then the payment's in their order", got, want)
	}
}
