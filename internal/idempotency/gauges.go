package idempotency

import (
	"context"
	"log/slog"
	"math"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/paymentsapi/paymentsapi/internal/clock"
)

// KeyCollector exports gauges of the keys of every operation, read from the
// database at scrape time so that every instance reports the same truth:
// how many keys are in flight, how many have no final answer, how old the
// oldest of those is and how their ages spread (a summary with the median,
// p95 and p99: one stuck key shows in the oldest age, many slow ones in the
// quantiles), and how many the reconciler gave up on. A key stuck in flight
// is a bug or an outage worth an alert.
type KeyCollector struct {
	db    *pgxpool.Pool
	clock clock.Clock
	log   *slog.Logger

	inFlight, unfinished, oldestUnfinished, unfinishedAge, manualReview *prometheus.Desc
	// ageQuantiles are the quantiles of the unfinished keys' ages that the
	// summary reports.
	ageQuantiles []float64
	operations   []string
}

// NewKeyCollector returns the collector; register it on a registry.
// operations are the registered operations' names: each has its
// manual-review gauge from the start, at 0, so that an alert on it never
// waits for a first key to exist (an absent series is not a zero).
func NewKeyCollector(db *pgxpool.Pool, clk clock.Clock, log *slog.Logger, operations ...string) *KeyCollector {
	return &KeyCollector{
		db: db, clock: clk, log: log, operations: operations,
		ageQuantiles: []float64{0.5, 0.95, 0.99},
		inFlight: prometheus.NewDesc("paymentsapi_idempotency_in_flight_keys",
			"Keys owned by a request with a live lease.", nil, nil),
		unfinished: prometheus.NewDesc("paymentsapi_idempotency_unfinished_keys",
			"Keys without a final answer (in flight, unknown outcome or retryable).", nil, nil),
		oldestUnfinished: prometheus.NewDesc("paymentsapi_idempotency_oldest_unfinished_key_age_seconds",
			"Age of the oldest key without a final answer; 0 when there is none.", nil, nil),
		unfinishedAge: prometheus.NewDesc("paymentsapi_idempotency_unfinished_key_age_seconds",
			"Ages of the keys without a final answer, at scrape time: count, sum and the 0.5, 0.95 and 0.99 quantiles (NaN when there is none).", nil, nil),
		manualReview: prometheus.NewDesc("paymentsapi_idempotency_manual_review_keys",
			"Keys the reconciler gave up on, by operation: a person must resolve their resource.", []string{"operation"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *KeyCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.inFlight, c.unfinished, c.oldestUnfinished, c.unfinishedAge, c.manualReview} {
		ch <- d
	}
}

// Collect implements prometheus.Collector with two indexed queries (the
// first reads the unfinished keys, idempotency_keys_unfinished_idx).
func (c *KeyCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	now := c.clock.Now()
	var (
		inFlight, unfinished int64
		oldest, ageSum       float64
		quantiles            []*float64
	)
	err := c.db.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE lease_expires_at > $1),
		       count(*),
		       COALESCE(max(age), 0),
		       COALESCE(sum(age), 0),
		       percentile_cont($2::float8[]) WITHIN GROUP (ORDER BY age)
		FROM (SELECT lease_expires_at, GREATEST(EXTRACT(EPOCH FROM ($1 - created_at))::float8, 0) AS age
		      FROM idempotency_keys WHERE response_status IS NULL) unfinished`,
		now, c.ageQuantiles).Scan(&inFlight, &unfinished, &oldest, &ageSum, &quantiles)
	if err != nil {
		c.log.Warn("key gauges unavailable", "error", err)
		return
	}
	review := map[string]int64{}
	for _, op := range c.operations {
		review[op] = 0
	}
	rows, err := c.db.Query(ctx, `
		SELECT operation, count(*) FROM idempotency_keys
		WHERE manual_review_at IS NOT NULL AND response_status IS NULL GROUP BY operation`)
	if err == nil {
		for rows.Next() {
			var (
				op string
				n  int64
			)
			if err = rows.Scan(&op, &n); err != nil {
				break
			}
			review[op] = n
		}
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
	}
	if err != nil {
		c.log.Warn("key gauges unavailable", "error", err)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.inFlight, prometheus.GaugeValue, float64(inFlight))
	ch <- prometheus.MustNewConstMetric(c.unfinished, prometheus.GaugeValue, float64(unfinished))
	ch <- prometheus.MustNewConstMetric(c.oldestUnfinished, prometheus.GaugeValue, oldest) // ages are clamped at 0 in the query
	ages := make(map[float64]float64, len(c.ageQuantiles))
	for i, q := range c.ageQuantiles {
		ages[q] = math.NaN()
		if i < len(quantiles) && quantiles[i] != nil {
			ages[q] = *quantiles[i]
		}
	}
	ch <- prometheus.MustNewConstSummary(c.unfinishedAge, uint64(unfinished), ageSum, ages)
	for op, n := range review {
		ch <- prometheus.MustNewConstMetric(c.manualReview, prometheus.GaugeValue, float64(n), op)
	}
}
