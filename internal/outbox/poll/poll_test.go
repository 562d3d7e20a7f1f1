package poll_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/outbox"
	"github.com/paymentsapi/paymentsapi/internal/outbox/poll"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
)

// The poller's behaviour shared with the stream is tested against both in
// package outbox/relay; these tests are the poller's own.

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// discard accepts every event.
var discard = outbox.PublisherFunc(func(context.Context, outbox.Event) error { return nil })

func newRelay(t *testing.T, pool *pgxpool.Pool, pub outbox.Publisher) *poll.Relay {
	t.Helper()
	r := poll.NewRelay(poll.RelayDeps{ConnString: pool.Config().ConnConfig.ConnString(), Publisher: pub, Clock: clock.System{}},
		poll.RelayConfig{})
	t.Cleanup(func() { r.Close(context.Background()) })
	return r
}

func write(t *testing.T, pool *pgxpool.Pool, pay string, created time.Time) string {
	t.Helper()
	e, err := outbox.NewEvent(context.Background(), "PaymentCreated", "payment", pay, map[string]string{"paymentId": pay}, created)
	if err != nil {
		t.Fatal(err)
	}
	if err := outbox.Write(context.Background(), pool, e); err != nil {
		t.Fatal(err)
	}
	return e.ID
}

func exec(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatal(err)
	}
}

// TestTheFirstStartPublishesWhatTheStreamMayNotHave: on a database the
// stream published, the poller's first start publishes what was created
// since the margin before the stream's position, events older than the
// poller's column included, and none from before.
func TestTheFirstStartPublishesWhatTheStreamMayNotHave(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	now := time.Now().UTC()
	streamed := write(t, pool, "pay_old", now.Add(-time.Hour))
	older := write(t, pool, "pay_a", now.Add(-2*time.Minute))
	exec(t, pool, `UPDATE outbox_events SET order_xid = NULL WHERE id IN ($1, $2)`, streamed, older) // as before 00041
	recent := write(t, pool, "pay_b", now)
	exec(t, pool, `INSERT INTO outbox_stream_positions (slot, committed_at, updated_at) VALUES ('s', $1, $1)`, now.Add(-time.Minute))

	var published []string // RunOnce publishes on its caller's goroutine
	pub := outbox.PublisherFunc(func(_ context.Context, e outbox.Event) error {
		published = append(published, e.ID)
		return nil
	})
	if _, err := newRelay(t, pool, pub).RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if want := []string{older, recent}; !slices.Equal(published, want) {
		t.Fatalf("published %v, want %v (not %s, published by the stream)", published, want, streamed)
	}
}

// TestAPositionAboveTheServersTransactionIDsIsRefused: a position copied
// from another server (its ids above this one's) would put every new event
// before it: the relay refuses to poll from it.
func TestAPositionAboveTheServersTransactionIDsIsRefused(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	exec(t, pool, `INSERT INTO outbox_poll_position (order_xid, seq, updated_at) VALUES ('999999999999', 0, now())`)
	_, err := newRelay(t, pool, discard).RunOnce(context.Background())
	if !errors.Is(err, poll.ErrAheadOfServer) {
		t.Fatalf("RunOnce from a copied position: %v, want ErrAheadOfServer", err)
	}
}

// TestCleanUpKeepsWhatThePollerHasStillToPublish: with the poller's
// position alone recorded, clean-up deletes the old events before it (and
// those older than its column) and keeps those after it, however old.
func TestCleanUpKeepsWhatThePollerHasStillToPublish(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	old := time.Now().UTC().Add(-3 * time.Hour)
	unnumbered := write(t, pool, "pay_a", old)
	exec(t, pool, `UPDATE outbox_events SET order_xid = NULL WHERE id = $1`, unnumbered)
	published := write(t, pool, "pay_b", old)
	pending := write(t, pool, "pay_c", old)
	exec(t, pool, `INSERT INTO outbox_poll_position (order_xid, seq, updated_at)
		SELECT order_xid, seq, now() FROM outbox_events WHERE id = $1`, published)

	if _, err := pool.Exec(ctx, outbox.DeletePublished, time.Now().Add(-time.Hour), 100); err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, `SELECT id::text FROM outbox_events ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	left, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(left, []string{pending}) {
		t.Fatalf("clean-up left %v, want only %s (after the position)", left, pending)
	}
}

// TestTheGaugesCountWhatWaitsAfterThePosition: the pending count and the
// oldest pending event's age, read from the position.
func TestTheGaugesCountWhatWaitsAfterThePosition(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	now := time.Now().UTC().Truncate(time.Microsecond)
	if _, err := newRelay(t, pool, discard).RunOnce(context.Background()); err != nil { // the first position
		t.Fatal(err)
	}
	write(t, pool, "pay_a", now.Add(-time.Minute))
	write(t, pool, "pay_b", now)
	reg := prometheus.NewRegistry()
	reg.MustRegister(poll.NewStatsCollector(pool, clock.NewFake(now), nil))
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		got[f.GetName()] = f.GetMetric()[0].GetGauge().GetValue()
	}
	if got["paymentsapi_outbox_pending_events"] != 2 || got["paymentsapi_outbox_oldest_pending_age_seconds"] != 60 ||
		got["paymentsapi_outbox_parked_events"] != 0 {
		t.Fatalf("gauges %v, want 2 pending, the oldest 60 s old, none parked", got)
	}
}
