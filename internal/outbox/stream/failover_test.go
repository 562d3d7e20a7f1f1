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
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paymentsapi/paymentsapi/internal/clock"
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
	pair, pool := migratedPair(t, pgcluster.Options{Synchronous: true}, true)
	ctx := context.Background()
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

// TestARelayCarriesOnPastAFrozenPrimary: the primary freezes (its
// connections stay open and silent, as behind a partition) and the
// standby is promoted. The relay, whose stream hears nothing more though it
// asks, gives the old server up and carries on on the new primary by
// itself: an event written there is published.
func TestARelayCarriesOnPastAFrozenPrimary(t *testing.T) {
	t.Parallel()
	pair, pool := migratedPair(t, pgcluster.Options{Synchronous: true}, true)
	ctx := context.Background()
	e := &env{url: pair.URL(), pool: pool, slot: stream.DefaultSlot}
	b := newBroker()
	e.run(t, b, stream.RelayConfig{Options: stream.Options{StatusInterval: 200 * time.Millisecond, SilenceLimit: time.Second}})
	e.waitCaughtUp(t)
	e.commit(t, e.event("pay_a", "PaymentCreated"))
	b.waitFor(t, 1)

	pair.Primary.Freeze()
	pair.Promote()
	promoted, err := database.Open(ctx, pair.Standby.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(promoted.Close)
	later := e.event("pay_a", "PaymentSucceeded")
	later.OccurredAt = time.Now().UTC() // the catch-up chooses by created_at
	batch := &pgx.Batch{}
	outbox.Queue(batch, later)
	if err := promoted.SendBatch(ctx, batch).Close(); err != nil {
		t.Fatal(err)
	}
	// Within a minute: the silence (a second here), a statement to the
	// frozen server left to its 10 s bound, pooled connections to it
	// pinged and dropped, the new slot and its catch-up.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		b.mu.Lock()
		done := slices.ContainsFunc(b.accepted, func(ev outbox.Event) bool { return ev.ID == later.ID })
		b.mu.Unlock()
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the event written on the new primary was not published within a minute of the freeze")
		}
	}
}

// TestARelayStopsEvenWhenItsServerFroze: a relay whose server froze (its
// connections open and silent, as behind a partition) still stops when
// asked, within its session's end bound: giving back its lock does not
// wait for the server forever.
func TestARelayStopsEvenWhenItsServerFroze(t *testing.T) {
	t.Parallel()
	pair, pool := migratedPair(t, pgcluster.Options{}, false)
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

// TestASlotTheServerInvalidatedIsCreatedAgain: a relay that stayed away
// while the server wrote more than max_slot_wal_keep_size finds its slot
// invalidated (wal_status lost: it can never be read again). The next relay
// drops it, creates it again, and publishes from the table what committed
// since its recorded position, the event written while it was away
// included.
func TestASlotTheServerInvalidatedIsCreatedAgain(t *testing.T) {
	t.Parallel()
	pair, pool := migratedPair(t, pgcluster.Options{}, false)
	ctx := context.Background()
	for _, q := range []string{
		`ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'`,
		`ALTER SYSTEM SET wal_keep_size = 0`, // else the server keeps the slot's WAL for the standby's sake
		`SELECT pg_reload_conf()`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	e := &env{url: pair.Primary.URL(), pool: pool, slot: stream.DefaultSlot}
	relay := func(b *broker) *stream.Relay {
		r := stream.NewRelay(stream.RelayDeps{ConnString: e.url, DB: pool, Publisher: b, Clock: clock.System{}},
			stream.RelayConfig{Options: stream.Options{Slot: e.slot}})
		t.Cleanup(func() { r.Close(context.Background()) })
		return r
	}
	first := relay(newBroker())
	if _, err := first.RunOnce(ctx); err != nil { // creates the slot, records a position
		t.Fatal(err)
	}
	first.Close(ctx)

	away := e.event("pay_a", "PaymentCreated")
	away.OccurredAt = time.Now().UTC() // the catch-up chooses by created_at
	e.commit(t, away)
	eventually(t, "the server invalidated the slot", func() (bool, string) {
		for _, q := range []string{`SELECT pg_logical_emit_message(false, 'test', repeat('x', 1000))`, `SELECT pg_switch_wal()`, `CHECKPOINT`} {
			if _, err := pool.Exec(ctx, q); err != nil {
				return false, err.Error()
			}
		}
		var status string
		err := pool.QueryRow(ctx, `SELECT wal_status FROM pg_replication_slots WHERE slot_name = $1`, e.slot).Scan(&status)
		return err == nil && status == "lost", fmt.Sprint(status, err)
	})

	b := newBroker()
	if _, err := relay(b).RunOnce(ctx); err != nil {
		t.Fatalf("a relay on an invalidated slot: %v", err)
	}
	if got := b.waitFor(t, 1); got[0].ID != away.ID {
		t.Fatalf("published %v, want the event written while the relay was away", got)
	}
}

// migratedPair starts a primary and a standby and migrates the primary,
// through a pool on both (following a promotion) or on the primary alone.
func migratedPair(t *testing.T, opts pgcluster.Options, both bool) (*pgcluster.Pair, *pgxpool.Pool) {
	t.Helper()
	pair := pgcluster.Start(t, opts)
	url := pair.Primary.URL()
	if both {
		url = pair.URL()
	}
	pool, err := database.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := database.Migrate(context.Background(), pool, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	return pair, pool
}
