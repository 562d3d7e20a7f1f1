package stream_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/outbox/stream"
)

func gauges(t *testing.T, c prometheus.Collector) map[string]float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		got[mf.GetName()] = mf.GetMetric()[0].GetGauge().GetValue()
	}
	return got
}

// TestTheBacklogGaugesReadTheSlot: with no slot the gauges say nothing is
// behind; with a slot that has not confirmed a transaction, they show the
// WAL it holds and how long ago the last confirmed one committed; parked
// events are counted, not those waiting behind them.
func TestTheBacklogGaugesReadTheSlot(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	clk := clock.NewFake(time.Now())
	c := stream.NewStatsCollector(e.pool, e.slot, clk, nil)
	want := map[string]float64{"paymentsapi_outbox_oldest_pending_age_seconds": 0, "paymentsapi_outbox_parked_events": 0}
	if got := gauges(t, c); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("without a slot: %v, want %v", got, want)
	}

	e.open(t, nil) // the slot, reading, confirming nothing
	if _, err := e.pool.Exec(ctx, `INSERT INTO outbox_stream_positions (slot, committed_at, updated_at) VALUES ($1, $2, $2)`,
		e.slot, clk.Now().Add(-30*time.Second)); err != nil {
		t.Fatal(err)
	}
	poison, after := e.event("pay_a", "PaymentCreated"), e.event("pay_a", "PaymentSucceeded")
	e.commit(t, poison, after)
	if _, err := e.pool.Exec(ctx, `
		INSERT INTO outbox_parked (event_id, aggregate_type, aggregate_id, seq, attempts, last_error, waits_for, parked_at)
		SELECT id, aggregate_type, aggregate_id, seq, 10, CASE WHEN id = $1 THEN 'too large' END, CASE WHEN id = $2 THEN $1::uuid END, now()
		FROM outbox_events`, poison.ID, after.ID); err != nil {
		t.Fatal(err)
	}
	got := gauges(t, c)
	if got["paymentsapi_outbox_stream_behind_bytes"] <= 0 || got["paymentsapi_outbox_oldest_pending_age_seconds"] != 30 ||
		got["paymentsapi_outbox_parked_events"] != 1 {
		t.Errorf("behind a transaction, with one event parked and one behind it: %v, want bytes behind, an age of 30 s and 1 parked", got)
	}
}
