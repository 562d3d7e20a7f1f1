package stream_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/database"
	"github.com/paymentsapi/paymentsapi/internal/outbox"
	"github.com/paymentsapi/paymentsapi/internal/outbox/stream"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
)

// versionBeforeTheStreamRelay is the last schema the polling relay ran on.
const versionBeforeTheStreamRelay = 32

// An upgrade from the polling relay loses nothing and keeps each payment's
// order: migration 00033 moves the events it parked into outbox_parked,
// and the stream relay's first catch-up publishes the events it had not
// published, but those of a payment with a parked event, which wait
// behind it; what it had published is not published again. Unparking the
// parked one then publishes the payment's events in order.
func TestAnUpgradeFromThePollingRelayPublishesWhatItLeft(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPoolAt(t, versionBeforeTheStreamRelay)
	// As the polling relay left them: pay_a's first event parked and its
	// second waiting behind it; pay_b's first published, its second not.
	ids := map[string]string{}
	for i, ev := range []struct{ name, pay, typ, published, parked string }{
		{"a1", "pay_a", "PaymentCreated", "NULL", "now()"},
		{"a2", "pay_a", "PaymentSucceeded", "NULL", "NULL"},
		{"b1", "pay_b", "PaymentCreated", "now()", "NULL"},
		{"b2", "pay_b", "PaymentSucceeded", "NULL", "NULL"},
	} {
		id := fmt.Sprintf("01900000-0000-7000-8000-%012d", i+1)
		ids[id] = ev.name
		lastError := "NULL"
		if ev.parked != "NULL" {
			lastError = "'message too large'"
		}
		if _, err := pool.Exec(ctx, `
			INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload, created_at, next_attempt_at,
			                           published_at, parked_at, attempts, last_error)
			VALUES ($1, 'payment', $2, $3, '{}', now(), now(), `+ev.published+`, `+ev.parked+`, 10, `+lastError+`)`,
			id, ev.pay, ev.typ); err != nil {
			t.Fatal(err)
		}
	}
	if err := database.Migrate(ctx, pool, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}

	b := newBroker()
	r := stream.NewRelay(stream.RelayDeps{ConnString: pool.Config().ConnConfig.ConnString(), DB: pool, Publisher: b, Clock: clock.System{}},
		stream.RelayConfig{})
	t.Cleanup(func() { r.Close(context.Background()) })
	published := func() string {
		t.Helper()
		if _, err := r.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		out := ""
		for _, e := range b.accepted {
			out += ids[e.ID] + " "
		}
		return out
	}
	if got := published(); got != "b2 " {
		t.Fatalf("the first catch-up published %q, want only pay_b's unpublished event (b2)", got)
	}
	parked, err := outbox.Parked(ctx, pool, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(parked) != 2 || ids[parked[0].ID] != "a1" || parked[0].LastError != "message too large" ||
		ids[parked[1].ID] != "a2" || parked[1].WaitsFor != parked[0].ID {
		t.Fatalf("parked after the upgrade: %+v; want a1 (its error kept) and a2 waiting for it", parked)
	}
	if err := outbox.Unpark(ctx, pool, parked[0].ID, clock.System{}.Now()); err != nil {
		t.Fatal(err)
	}
	if got := published(); got != "b2 a1 a2 " {
		t.Fatalf("after the unpark: published %q, want b2 then pay_a's events in order", got)
	}
}
