package payments

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/paymentsapi/paymentsapi/internal/clock"
)

// StateCollector exports gauges read from the database at scrape time, so
// that every instance reports the same truth: how many keys are in flight and
// how old the oldest unfinished one is, how many payments await recovery and
// how many a person must review. A key stuck in flight or a growing unknown
// count is a bug or an outage worth an alert.
type StateCollector struct {
	db    *pgxpool.Pool
	clock clock.Clock
	log   *slog.Logger

	inFlight, unfinished, oldestUnfinished, unknown, manualReview *prometheus.Desc
}

// NewStateCollector returns the collector; register it on a registry.
func NewStateCollector(db *pgxpool.Pool, clk clock.Clock, log *slog.Logger) *StateCollector {
	return &StateCollector{
		db: db, clock: clk, log: log,
		inFlight: prometheus.NewDesc("paymentsapi_idempotency_in_flight_keys",
			"Keys owned by a request with a live lease.", nil, nil),
		unfinished: prometheus.NewDesc("paymentsapi_idempotency_unfinished_keys",
			"Keys without a final answer (in flight, unknown outcome or retryable).", nil, nil),
		oldestUnfinished: prometheus.NewDesc("paymentsapi_idempotency_oldest_unfinished_key_age_seconds",
			"Age of the oldest key without a final answer; 0 when there is none.", nil, nil),
		unknown: prometheus.NewDesc("paymentsapi_payments_unknown_outcome",
			"Payments in UNKNOWN_REQUIRES_RECOVERY.", nil, nil),
		manualReview: prometheus.NewDesc("paymentsapi_payments_manual_review",
			"Payments the reconciler gave up on; they stay PROCESSING until a person resolves them.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *StateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.inFlight, c.unfinished, c.oldestUnfinished, c.unknown, c.manualReview} {
		ch <- d
	}
}

// Collect implements prometheus.Collector with two indexed queries.
func (c *StateCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	now := c.clock.Now()
	var (
		inFlight, unfinished, unknown, review int64
		oldest                                float64
	)
	err := c.db.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE lease_expires_at > $1),
		       count(*),
		       COALESCE(EXTRACT(EPOCH FROM ($1 - min(created_at))), 0)::float8
		FROM idempotency_keys WHERE response_status IS NULL`, now).Scan(&inFlight, &unfinished, &oldest)
	if err == nil {
		err = c.db.QueryRow(ctx, `
			SELECT (SELECT count(*) FROM payments WHERE state = 'UNKNOWN_REQUIRES_RECOVERY' AND manual_review_at IS NULL),
			       (SELECT count(*) FROM payments WHERE manual_review_at IS NOT NULL
			            AND state IN ('PROVIDER_REQUEST_SENT', 'UNKNOWN_REQUIRES_RECOVERY'))`).Scan(&unknown, &review)
	}
	if err != nil {
		c.log.Warn("state gauges unavailable", "error", err)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.inFlight, prometheus.GaugeValue, float64(inFlight))
	ch <- prometheus.MustNewConstMetric(c.unfinished, prometheus.GaugeValue, float64(unfinished))
	ch <- prometheus.MustNewConstMetric(c.oldestUnfinished, prometheus.GaugeValue, max(oldest, 0))
	ch <- prometheus.MustNewConstMetric(c.unknown, prometheus.GaugeValue, float64(unknown))
	ch <- prometheus.MustNewConstMetric(c.manualReview, prometheus.GaugeValue, float64(review))
}
