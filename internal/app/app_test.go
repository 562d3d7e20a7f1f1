package app_test

import (
	"context"
	"log/slog"
	"math"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/paymentsapi/paymentsapi/internal/app"
	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

var now = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

// gather returns the metrics of reg by name and then by their "table"
// label ("" for none).
func gather(t *testing.T, reg *prometheus.Registry) map[string]map[string]*dto.Metric {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]*dto.Metric{}
	for _, mf := range mfs {
		out[mf.GetName()] = map[string]*dto.Metric{}
		for _, m := range mf.GetMetric() {
			table := ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "table" {
					table = l.GetValue()
				}
			}
			out[mf.GetName()][table] = m
		}
	}
	return out
}

// TestUnfinishedKeyAgesAreSummarised: the ages of the keys without a final
// answer are exported as a summary with the median, p95 and p99, read at
// scrape time; finished keys do not count.
func TestUnfinishedKeyAgesAreSummarised(t *testing.T) {
	t.Parallel()
	db := pgtest.NewPool(t)
	ctx := context.Background()
	// 100 unfinished keys, 1 s to 100 s old, and 50 finished ones, older.
	_, err := db.Exec(ctx, `
		INSERT INTO idempotency_keys (tenant_id, operation, idempotency_key, fingerprint, resource_type, resource_id,
		    response_status, created_at, completed_at)
		SELECT 't', 'create_payment', 'k' || i, '\x01', 'payment', 'p' || i,
		       CASE WHEN i > 100 THEN 201 END, $1::timestamptz - i * interval '1 second',
		       CASE WHEN i > 100 THEN $1::timestamptz END
		FROM generate_series(1, 150) i`, now)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	app.RegisterGauges(reg, db, clock.NewFake(now), slog.New(slog.DiscardHandler))

	m := gather(t, reg)["paymentsapi_idempotency_unfinished_key_age_seconds"][""]
	if m == nil {
		t.Fatal("no summary of the unfinished keys' ages")
	}
	s := m.GetSummary()
	if s.GetSampleCount() != 100 || s.GetSampleSum() != 5050 {
		t.Errorf("count %d, sum %v: want 100 keys, 5050 s in all", s.GetSampleCount(), s.GetSampleSum())
	}
	want := map[float64]float64{0.5: 50.5, 0.95: 95.05, 0.99: 99.01} // interpolated between the ages 1..100
	for _, q := range s.GetQuantile() {
		if w, ok := want[q.GetQuantile()]; !ok || math.Abs(q.GetValue()-w) > 1e-6 {
			t.Errorf("quantile %v = %v, want %v", q.GetQuantile(), q.GetValue(), w)
		}
		delete(want, q.GetQuantile())
	}
	if len(want) > 0 {
		t.Errorf("quantiles missing: %v", want)
	}

	// No unfinished key: the count is 0 and the quantiles NaN.
	if _, err := db.Exec(ctx, `UPDATE idempotency_keys SET response_status = 201, completed_at = $1`, now); err != nil {
		t.Fatal(err)
	}
	s = gather(t, reg)["paymentsapi_idempotency_unfinished_key_age_seconds"][""].GetSummary()
	if s.GetSampleCount() != 0 || len(s.GetQuantile()) != 3 || !math.IsNaN(s.GetQuantile()[0].GetValue()) {
		t.Errorf("with no unfinished key: %v", s)
	}
}

// TestTableSizesFollowTheTables: the sizes on disk of the key, outbox and
// inbox tables, and their estimated rows once analyzed, are exported and grow
// with the tables.
func TestTableSizesFollowTheTables(t *testing.T) {
	t.Parallel()
	db := pgtest.NewPool(t)
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	app.RegisterGauges(reg, db, clock.NewFake(now), slog.New(slog.DiscardHandler))
	tables := []string{"idempotency_keys", "outbox_events", "inbox"}

	before := gather(t, reg)
	for _, table := range tables {
		if before["paymentsapi_table_size_bytes"][table] == nil {
			t.Fatalf("no size of %s", table)
		}
	}
	for _, sql := range []string{`
		INSERT INTO idempotency_keys (tenant_id, operation, idempotency_key, fingerprint, resource_type, resource_id, created_at)
		SELECT 't', 'create_payment', 'k' || i, '\x01', 'payment', 'p' || i, $1 FROM generate_series(1, 3000) i`, `
		INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload, created_at, next_attempt_at)
		SELECT gen_random_uuid(), 'payment', 'p' || i, 'PaymentCreated', '{}', $1, $1 FROM generate_series(1, 3000) i`, `
		INSERT INTO inbox (consumer, event_id, event_type, aggregate_id, outcome, received_at)
		SELECT 'ledger', gen_random_uuid(), 'PaymentSucceeded', 'p' || i, 'applied', $1 FROM generate_series(1, 3000) i`,
	} {
		if _, err := db.Exec(ctx, sql, now); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Exec(ctx, `ANALYZE idempotency_keys, outbox_events, inbox`); err != nil {
		t.Fatal(err)
	}
	after := gather(t, reg)
	for _, table := range tables {
		b, a := before["paymentsapi_table_size_bytes"][table].GetGauge().GetValue(), after["paymentsapi_table_size_bytes"][table].GetGauge().GetValue()
		if a < b+3000*50 {
			t.Errorf("%s: %v bytes, then %v after 3000 rows", table, b, a)
		}
		if rows := after["paymentsapi_table_rows_estimate"][table].GetGauge().GetValue(); rows != 3000 {
			t.Errorf("%s: an estimate of %v rows, want 3000", table, rows)
		}
	}
}

// The manual-review gauge exists for every registered operation from the
// start, at 0: an alert on it must not wait for a first key (an absent
// series is not a zero).
func TestManualReviewGaugeIsZeroNotAbsent(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	app.RegisterGauges(reg, pgtest.NewPool(t), clock.NewFake(now), slog.New(slog.DiscardHandler))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	ops := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "paymentsapi_idempotency_manual_review_keys" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				ops[l.GetValue()] = m.GetGauge().GetValue()
			}
		}
	}
	for _, m := range app.Modules(app.Config{}) {
		if v, ok := ops[m.Name]; !ok || v != 0 {
			t.Errorf("manual review keys of %s: %v (present %v), want 0", m.Name, v, ok)
		}
	}
}
