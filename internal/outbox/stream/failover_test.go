package stream_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/paymentsapi/paymentsapi/internal/database"
	"github.com/paymentsapi/paymentsapi/internal/outbox"
	"github.com/paymentsapi/paymentsapi/internal/outbox/stream"
	"github.com/paymentsapi/paymentsapi/internal/pgcluster"
)

// TestTheRelayCarriesOnThroughAFailover: a primary with a synchronous
// standby; the relay has published a payment's first event and recorded its
// position, then cannot publish (the broker is down) while the payment's
// second event commits; the primary crashes and the standby, which has the
// rows but no slot, is promoted. The relay reconnects to it by itself,
// creates the slot, publishes what the lost slot had not, and streams what
// comes next: the payment's events go out in order.
func TestTheRelayCarriesOnThroughAFailover(t *testing.T) {
	t.Parallel()
	pair := pgcluster.Start(t, pgcluster.Options{Synchronous: true, LogicalDecoding: true})
	ctx := context.Background()
	pool, err := database.Open(ctx, pair.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := database.Migrate(ctx, pool, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	e := &env{url: pair.URL(), pool: pool, slot: stream.DefaultSlot} // the pair is this test's alone
	now := func(pay, typ string) outbox.Event {
		ev := e.event(pay, typ)
		ev.OccurredAt = time.Now().UTC() // the catch-up chooses by created_at
		return ev
	}
	b := newBroker()
	var down atomic.Bool
	b.fail = func(outbox.Event, int) error {
		if down.Load() {
			return fmt.Errorf("no responders: %w", outbox.ErrBrokerUnavailable)
		}
		return nil
	}
	e.run(t, b, stream.RelayConfig{})
	caughtUp := e.waitCaughtUp(t)
	e.commit(t, now("pay_a", "PaymentCreated"))
	e.waitRecorded(t, caughtUp) // published through the stream
	b.waitFor(t, 1)

	down.Store(true)
	e.commit(t, now("pay_a", "PaymentSucceeded")) // on the standby too: it is synchronous
	time.Sleep(200 * time.Millisecond)            // the relay tries, and fails
	pair.Primary.Crash()
	pair.Promote()
	down.Store(false)

	refund := now("pay_a", "RefundCreated")
	// The pool finds the new primary once its connections to the old one
	// failed. (A commit that succeeded but was reported failed would make
	// the next try a duplicate: that is an answer too.)
	eventually(t, "a commit on the promoted standby", func() (bool, string) {
		batch := &pgx.Batch{}
		outbox.Queue(batch, refund)
		err := pool.SendBatch(ctx, batch).Close()
		return err == nil || strings.Contains(err.Error(), "outbox_events_pkey"), fmt.Sprint(err)
	})
	want := []string{"PaymentCreated", "PaymentSucceeded", "RefundCreated"}
	eventually(t, fmt.Sprintf("after the failover pay_a's events first went out as %v", want), func() (bool, string) {
		b.mu.Lock()
		defer b.mu.Unlock()
		got := firstSeen(b.accepted)["pay_a"]
		return slices.Equal(got, want), fmt.Sprint(got)
	})
}

// firstSeen is byAggregate of each event's first publication: a failover
// publishes some again.
func firstSeen(events []outbox.Event) map[string][]string {
	seen := map[string]bool{}
	var first []outbox.Event
	for _, e := range events {
		if !seen[e.ID] {
			seen[e.ID] = true
			first = append(first, e)
		}
	}
	return byAggregate(first)
}

// TestARelayStopsEvenWhenItsServerFroze: a relay whose server froze (its
// connections open and silent, as behind a partition) still stops when
// asked, within its session's end bound: giving back its lock does not
// wait for the server forever.
func TestARelayStopsEvenWhenItsServerFroze(t *testing.T) {
	t.Parallel()
	pair := pgcluster.Start(t, pgcluster.Options{LogicalDecoding: true})
	ctx := context.Background()
	pool, err := database.Open(ctx, pair.Primary.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := database.Migrate(ctx, pool, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	e := &env{url: pair.Primary.URL(), pool: pool, slot: stream.DefaultSlot}
	stop := e.run(t, newBroker(), stream.RelayConfig{})
	e.waitCaughtUp(t)
	pair.Primary.Freeze()
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(30 * time.Second):
		t.Fatal("the relay did not stop within 30 s of being asked, its server frozen")
	}
}
