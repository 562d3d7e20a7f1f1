package delivery_test

import (
	"context"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/paymentsapi/paymentsapi/internal/cleanup"
	"github.com/paymentsapi/paymentsapi/internal/delivery"
)

// gather returns the registry's metrics by name and outcome label (""
// for none): a counter's or gauge's value, a histogram's count.
func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range m.GetLabel() {
				name += "/" + l.GetValue()
			}
			switch {
			case m.Counter != nil:
				out[name] = m.GetCounter().GetValue()
			case m.Gauge != nil:
				out[name] = m.GetGauge().GetValue()
			case m.Histogram != nil:
				out[name] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

// The attempts are counted and timed by outcome; the gauges read the age
// of the oldest message not delivered and the disabled endpoints from the
// database.
func TestMetrics(t *testing.T) {
	t.Parallel()
	e := newEnv(t, devPolicy, nil)
	e.hook(tenantA, "/ok")
	e.hook(tenantA, "/gone")
	e.recv.status("/gone", http.StatusGone)
	e.hook(tenantA, "/down")
	e.recv.status("/down", http.StatusBadGateway)
	reg := prometheus.NewRegistry()
	m := delivery.NewMetrics(reg, e.pool, e.clk, slog.New(slog.DiscardHandler))
	e.record("tenant_a", succeeded)
	e.clk.Advance(time.Minute)
	before := gather(t, reg)
	if before["paymentsapi_webhook_oldest_pending_age_seconds"] != 60 || before["paymentsapi_webhook_disabled_endpoints"] != 0 {
		t.Errorf("before delivery: %v", before)
	}
	e.runOnce(e.workerWith(delivery.Config{}, m))
	after := gather(t, reg)
	for name, want := range map[string]float64{
		"paymentsapi_webhook_attempts_total/delivered":           1,
		"paymentsapi_webhook_attempts_total/gone":                1,
		"paymentsapi_webhook_attempts_total/retrying":            1,
		"paymentsapi_webhook_attempts_total/failed":              0,
		"paymentsapi_webhook_attempt_duration_seconds/delivered": 1,
		"paymentsapi_webhook_attempt_duration_seconds/retrying":  1,
		"paymentsapi_webhook_oldest_pending_age_seconds":         60, // /down's, waiting for its retry
		"paymentsapi_webhook_disabled_endpoints":                 1,
	} {
		if got, ok := after[name]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", name, got, ok, want)
		}
	}
}

// The messages, attempts and resends of an event go with it when the event
// log's clean-up deletes it (the outbox's, since the outbox is the log).
func TestRetentionTakesDeliveriesWithTheirEvent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, devPolicy, nil)
	e.hook(tenantA, "/down")
	e.recv.status("/down", http.StatusServiceUnavailable)
	ev := e.record("tenant_a", succeeded)
	e.runOnce(e.worker(delivery.Config{}))
	if r := e.do(tenantA, "POST", "/events/"+ev+"/resend", "resend-old", ""); r.status != http.StatusAccepted {
		t.Fatalf("resend: %v", r)
	}
	count := func() (n int) {
		t.Helper()
		err := e.pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM webhook_messages) + (SELECT count(*) FROM webhook_attempts)
			+ (SELECT count(*) FROM webhook_resends)`).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count(); n != 3 {
		t.Fatalf("%d rows before clean-up, want a message, an attempt and a resend", n)
	}
	e.clk.Advance(2 * time.Hour)
	e.relayed(e.clk.Now()) // the outbox's clean-up keeps what a relay has not passed
	j := cleanup.New(e.pool, e.clk, cleanup.Policy{ReplayTTL: time.Hour, MetadataTTL: time.Hour, OutboxRetention: time.Hour,
		EventRetention: time.Hour}, slog.New(slog.DiscardHandler))
	if _, err := j.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 0 {
		t.Errorf("%d rows left after the event was deleted", n)
	}
}
