package payments

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// StateCollector exports the payment gauges, read from the database at
// scrape time: how many payments await recovery, and how many a person must
// review. A growing unknown count is a bug or an outage worth an alert. (The
// gauges of the keys themselves are idempotency.KeyCollector's.)
type StateCollector struct {
	db  *pgxpool.Pool
	log *slog.Logger

	unknown, manualReview *prometheus.Desc
}

// NewStateCollector returns the collector; register it on a registry.
func NewStateCollector(db *pgxpool.Pool, log *slog.Logger) *StateCollector {
	return &StateCollector{
		db: db, log: log,
		unknown: prometheus.NewDesc("paymentsapi_payments_unknown_outcome",
			"Payments in UNKNOWN_REQUIRES_RECOVERY not yet given up on.", nil, nil),
		manualReview: prometheus.NewDesc("paymentsapi_payments_manual_review",
			"Payments the reconciler gave up on; they stay PROCESSING until a person resolves them.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *StateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.unknown
	ch <- c.manualReview
}

// Collect implements prometheus.Collector.
func (c *StateCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	unknown, review, err := countRecoveryStates(ctx, c.db)
	if err != nil {
		c.log.Warn("payment gauges unavailable", "error", err)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.unknown, prometheus.GaugeValue, float64(unknown))
	ch <- prometheus.MustNewConstMetric(c.manualReview, prometheus.GaugeValue, float64(review))
}
