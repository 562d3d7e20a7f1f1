package stream_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/outbox"
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

// A replay of an event cleaned up after it was asked for publishes
// nothing, and the stream still moves past it: the next RunOnce returns.
func TestAReplayOfAnEventGoneSinceIsPassedOver(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	ev := e.event("pay_a", "PaymentCreated")
	e.commit(t, ev)
	b := newBroker()
	r := stream.NewRelay(stream.RelayDeps{ConnString: e.url, DB: e.pool, Publisher: b, Clock: clock.System{}},
		stream.RelayConfig{Options: stream.Options{Slot: e.slot}})
	t.Cleanup(func() { r.Close(context.Background()) })
	if n, err := r.RunOnce(ctx); err != nil || n != 1 {
		t.Fatalf("RunOnce: %d, %v; want 1", n, err)
	}
	if missing, err := stream.Replay(ctx, e.pool, []string{ev.ID}); err != nil || len(missing) != 0 {
		t.Fatalf("Replay: %v, %v", missing, err)
	}
	if _, err := e.pool.Exec(ctx, `DELETE FROM outbox_events WHERE id = $1`, ev.ID); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if n, err := r.RunOnce(rctx); err != nil || n != 0 {
		t.Fatalf("RunOnce after replaying a deleted event: %d, %v; want 0 and done", n, err)
	}
	later := e.event("pay_b", "PaymentCreated")
	e.commit(t, later)
	if n, err := r.RunOnce(rctx); err != nil || n != 1 {
		t.Fatalf("RunOnce after it: %d, %v; want the next event", n, err)
	}
}

// A catch-up publishes after its snapshot is let go: an exported snapshot
// holds the server's oldest transaction horizon (vacuum, in every
// database), and a catch-up's publishing can wait on a broker for hours.
func TestACatchUpPublishesWithoutHoldingItsSnapshot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	e.commit(t, e.event("pay_a", "PaymentCreated"))
	b := newBroker()
	held := -1
	b.fail = func(outbox.Event, int) error {
		// The replication connections of this database that hold back
		// the horizon, seen while the catch-up publishes.
		if err := e.pool.QueryRow(ctx, `
			SELECT count(*) FROM pg_stat_activity
			WHERE backend_type = 'walsender' AND datname = current_database() AND backend_xmin IS NOT NULL`).Scan(&held); err != nil {
			return err
		}
		return nil
	}
	r := stream.NewRelay(stream.RelayDeps{ConnString: e.url, DB: e.pool, Publisher: b, Clock: clock.System{}},
		stream.RelayConfig{Options: stream.Options{Slot: e.slot}})
	t.Cleanup(func() { r.Close(context.Background()) })
	if n, err := r.RunOnce(ctx); err != nil || n != 1 {
		t.Fatalf("RunOnce: %d, %v; want 1, through the catch-up", n, err)
	}
	if held != 0 {
		t.Errorf("%d replication connections held a snapshot while the catch-up published, want none", held)
	}
}
