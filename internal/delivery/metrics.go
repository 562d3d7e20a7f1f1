package delivery

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/paymentsapi/paymentsapi/internal/clock"
)

// Metrics are the webhook deliveries' Prometheus metrics. No label carries
// an id.
//
// A counter and a histogram, of this instance's worker, by the outcome of
// an attempt: delivered (a 2xx), retrying (failed, another attempt is due),
// failed (failed, and the schedule has run out), gone (a 410: the endpoint
// is disabled), superseded (not booked: another claim took the message
// after this one's lease ran out):
//
//	paymentsapi_webhook_attempts_total{outcome}
//	paymentsapi_webhook_attempt_duration_seconds{outcome}
//
// Gauges, read from the database on each scrape, the same on every
// instance (aggregate them with max, not sum):
//
//	paymentsapi_webhook_oldest_pending_age_seconds  how long the oldest message not yet delivered has waited (0 when none)
//	paymentsapi_webhook_disabled_endpoints          endpoints disabled (by a 410, or after days of failures) and not deleted
type Metrics struct {
	Attempts *prometheus.CounterVec
	Duration *prometheus.HistogramVec
}

// outcomes are the values of the outcome label.
func outcomes() []string { return []string{"delivered", "retrying", "failed", "gone", "superseded"} }

// NewMetrics creates the metrics and registers them on reg, with the
// collector that reads the gauges from db on each scrape (bounded by a 2 s
// timeout; a failed read is logged and leaves the gauges out of that
// scrape).
func NewMetrics(reg prometheus.Registerer, db *pgxpool.Pool, clk clock.Clock, log *slog.Logger) *Metrics {
	m := &Metrics{
		Attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "paymentsapi_webhook_attempts_total",
			Help: "Webhook delivery attempts by outcome: delivered, retrying, failed, gone, superseded.",
		}, []string{"outcome"}),
		Duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "paymentsapi_webhook_attempt_duration_seconds",
			Help:    "Webhook delivery attempts, from the request to the last byte of the answer kept, by outcome.",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"outcome"}),
	}
	for _, o := range outcomes() {
		m.Attempts.WithLabelValues(o) // export zeroes from the start
	}
	reg.MustRegister(m.Attempts, m.Duration, &gauges{
		db: db, clock: clk, log: log,
		oldest: prometheus.NewDesc("paymentsapi_webhook_oldest_pending_age_seconds",
			"How long the oldest webhook message not yet delivered has waited, 0 when none.", nil, nil),
		disabled: prometheus.NewDesc("paymentsapi_webhook_disabled_endpoints",
			"Webhook endpoints disabled (a 410 Gone, or days without a success) and not deleted.", nil, nil),
	})
	return m
}

func (m *Metrics) attempted(outcome string, d time.Duration) {
	if m == nil {
		return
	}
	m.Attempts.WithLabelValues(outcome).Inc()
	m.Duration.WithLabelValues(outcome).Observe(d.Seconds())
}

// gauges reads the deliveries' backlog and the disabled endpoints from the
// database on scrape.
type gauges struct {
	db               *pgxpool.Pool
	clock            clock.Clock
	log              *slog.Logger
	oldest, disabled *prometheus.Desc
}

// GaugesSQL reads the gauges: the first entry of webhook_messages_pending_idx,
// and the count of the disabled endpoints (a few rows of a small table).
const GaugesSQL = `
		SELECT (SELECT min(pending_since) FROM webhook_messages WHERE status = 'pending'),
		       (SELECT count(*) FROM webhook_endpoints WHERE status = 'disabled' AND deleted_at IS NULL)`

// Describe sends the gauges' descriptors.
func (g *gauges) Describe(ch chan<- *prometheus.Desc) {
	ch <- g.oldest
	ch <- g.disabled
}

// Collect reads the gauges and sends them.
func (g *gauges) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var (
		oldest   *time.Time
		disabled int64
	)
	if err := g.db.QueryRow(ctx, GaugesSQL).Scan(&oldest, &disabled); err != nil {
		g.log.WarnContext(ctx, "could not read the webhook deliveries' gauges", "error", err)
		return
	}
	age := 0.0
	if oldest != nil {
		age = max(g.clock.Now().Sub(*oldest), 0).Seconds()
	}
	ch <- prometheus.MustNewConstMetric(g.oldest, prometheus.GaugeValue, age)
	ch <- prometheus.MustNewConstMetric(g.disabled, prometheus.GaugeValue, float64(disabled))
}
