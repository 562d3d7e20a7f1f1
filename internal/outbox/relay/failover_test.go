package relay_test

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
	"github.com/paymentsapi/paymentsapi/internal/outbox/relay"
	"github.com/paymentsapi/paymentsapi/internal/pgcluster"
	"github.com/paymentsapi/paymentsapi/internal/testio"
)

// forEachReaderOnAPair runs test per reader on a primary and its standby,
// migrated, with a pool that follows a promotion.
func forEachReaderOnAPair(t *testing.T, opts pgcluster.Options, test func(t *testing.T, e *env, pair *pgcluster.Pair)) {
	t.Parallel()
	for _, r := range readers {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			pair := pgcluster.Start(t, opts)
			ctx := context.Background()
			pool, err := database.Open(ctx, pair.URL())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			if err := database.Migrate(ctx, pool, slog.New(slog.DiscardHandler)); err != nil {
				t.Fatal(err)
			}
			e := &env{pool: pool, url: pair.URL(), broker: newBroker()}
			e.newRelay = func(o options) relay.Relay {
				rl := r.new(e.url, pool, e.broker, o)
				t.Cleanup(func() { rl.Close(context.Background()) })
				return rl
			}
			test(t, e, pair)
		})
	}
}

// commitSomewhere commits ev through the pool, trying until the pool
// reaches a primary (after a promotion, once its connections to the old
// one failed). A commit that succeeded but was reported failed makes the
// next try a duplicate: that is an answer too.
func (e *env) commitSomewhere(t *testing.T, ev outbox.Event) {
	t.Helper()
	eventually(t, "a commit on the primary", func() (bool, string) {
		batch := &pgx.Batch{}
		outbox.Queue(batch, ev)
		err := e.pool.SendBatch(context.Background(), batch).Close()
		return err == nil || strings.Contains(err.Error(), "outbox_events_pkey"), fmt.Sprint(err)
	})
}

func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	testio.Eventually(t, what, time.Minute, cond)
}

// now is an event created now: a catch-up chooses by creation time.
func (e *env) now(pay, typ string) outbox.Event {
	ev := e.event(pay, typ)
	ev.OccurredAt = time.Now().UTC()
	return ev
}

// TestEachReaderCarriesOnThroughAFailover: a primary with a synchronous
// standby; the reader published a payment's first event, then cannot
// publish (the broker is down) while the payment's second event commits;
// the primary crashes and the standby is promoted. The reader carries on
// on the new primary by itself: the payment's three events first go out in
// order.
func TestEachReaderCarriesOnThroughAFailover(t *testing.T) {
	forEachReaderOnAPair(t, pgcluster.Options{Synchronous: true}, func(t *testing.T, e *env, pair *pgcluster.Pair) {
		var down atomic.Bool
		e.broker.setFail(func(outbox.Event, int) error {
			if down.Load() {
				return fmt.Errorf("no responders: %w", outbox.ErrBrokerUnavailable)
			}
			return nil
		})
		run(t, e.newRelay(options{}))
		created := e.now("pay_a", "PaymentCreated")
		e.commit(t, created)
		e.broker.waitFor(t, created.ID)

		down.Store(true)
		succeeded := e.now("pay_a", "PaymentSucceeded")
		e.commit(t, succeeded) // on the standby too: it is synchronous
		time.Sleep(200 * time.Millisecond)
		pair.Primary.Crash()
		pair.Promote()
		down.Store(false)

		refund := e.now("pay_a", "RefundCreated")
		e.commitSomewhere(t, refund)
		got := firsts(e.broker.waitFor(t, created.ID, succeeded.ID, refund.ID))
		if want := ids(created, succeeded, refund); !slices.Equal(got["pay_a"], want) {
			t.Fatalf("pay_a's events first went out as %v, want %v", got["pay_a"], want)
		}
	})
}

// TestNothingCommittedOnAPromotedStandbyIsSkipped: the standby stops
// receiving (the lost tail of an asynchronous failover); the primary
// commits an event the reader publishes, and records that it did, which
// the standby never gets; the primary crashes and the standby is promoted.
// What the new primary commits is published: the reader's position there
// is its own (older), and the transaction ids it hands out, which may be
// the lost ones again, come after it.
func TestNothingCommittedOnAPromotedStandbyIsSkipped(t *testing.T) {
	forEachReaderOnAPair(t, pgcluster.Options{}, func(t *testing.T, e *env, pair *pgcluster.Pair) {
		ctx := context.Background()
		run(t, e.newRelay(options{}))
		first := e.now("pay_a", "PaymentCreated")
		e.commit(t, first)
		e.broker.waitFor(t, first.ID)
		standby, err := pgx.Connect(ctx, pair.Standby.URL())
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, "the standby has the first event", func() (bool, string) {
			var n int
			err := standby.QueryRow(ctx, `SELECT count(*) FROM outbox_events WHERE id = $1`, first.ID).Scan(&n)
			return err == nil && n == 1, fmt.Sprint(n, err)
		})
		_ = standby.Close(ctx)

		pair.Detach()
		var lost []string
		for i := range 20 { // transaction ids the promoted standby will hand out again
			ev := e.now(fmt.Sprintf("pay_lost_%d", i), "PaymentCreated")
			e.commit(t, ev)
			lost = append(lost, ev.ID)
		}
		e.broker.waitFor(t, lost...)
		time.Sleep(200 * time.Millisecond) // time enough to record that it published them
		pair.Primary.Crash()
		pair.Promote()

		var fresh []string
		for i := range 5 {
			ev := e.now(fmt.Sprintf("pay_new_%d", i), "PaymentCreated")
			e.commitSomewhere(t, ev)
			fresh = append(fresh, ev.ID)
		}
		e.broker.waitFor(t, fresh...)
	})
}
