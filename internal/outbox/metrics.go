package outbox

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/paymentsapi/paymentsapi/internal/clock"
)

// Metrics are the outbox's Prometheus metrics. No label carries an id.
//
// Gauges, read from the database on each scrape, so they are the same on
// every instance (aggregate them with max, not sum):
//
//	paymentsapi_outbox_pending_events             rows not yet published and not parked
//	paymentsapi_outbox_oldest_pending_age_seconds age of the oldest of them (0 when none): the publish lag
//	paymentsapi_outbox_parked_events              rows the relay gave up on
//
// Counters and a histogram, of this instance's relay:
//
//	paymentsapi_outbox_published_total
//	paymentsapi_outbox_publish_failures_total
//	paymentsapi_outbox_parked_total
//	paymentsapi_outbox_publish_lag_seconds        from the event's creation to its publication
type Metrics struct {
	// Published counts events this instance published and marked.
	Published prometheus.Counter
	// Failures counts failed publish attempts (each booked on its row).
	Failures prometheus.Counter
	// Parked counts rows this instance parked.
	Parked prometheus.Counter
	// Lag measures the time from an event's creation to its publication.
	Lag prometheus.Histogram
}

// NewMetrics creates the outbox metrics and registers them on reg, with a
// collector that reads the pending and parked counts from db on each
// scrape (bounded by a 2 s timeout; a failed read is logged and leaves the
// gauges out of that scrape rather than failing it).
func NewMetrics(reg prometheus.Registerer, db DB, clk clock.Clock, log *slog.Logger) *Metrics {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := &Metrics{
		Published: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "paymentsapi_outbox_published_total",
			Help: "Outbox events published and marked published by this instance's relay.",
		}),
		Failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "paymentsapi_outbox_publish_failures_total",
			Help: "Failed outbox publish attempts; each is retried with backoff or parked.",
		}),
		Parked: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "paymentsapi_outbox_parked_total",
			Help: "Outbox events parked by this instance's relay after too many failed attempts.",
		}),
		Lag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "paymentsapi_outbox_publish_lag_seconds",
			Help:    "Time from an outbox event's creation to its publication.",
			Buckets: []float64{.01, .05, .1, .5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 3600},
		}),
	}
	reg.MustRegister(m.Published, m.Failures, m.Parked, m.Lag, newStatsCollector(db, clk, log))
	return m
}

func (m *Metrics) published(lag time.Duration) {
	if m == nil {
		return
	}
	m.Published.Inc()
	m.Lag.Observe(max(lag, 0).Seconds())
}

func (m *Metrics) failed() {
	if m != nil {
		m.Failures.Inc()
	}
}

func (m *Metrics) parkedOne() {
	if m != nil {
		m.Parked.Inc()
	}
}

// statsCollector reads the outbox's backlog from the database on scrape.
type statsCollector struct {
	db                                  DB
	clock                               clock.Clock
	log                                 *slog.Logger
	pendingDesc, oldestDesc, parkedDesc *prometheus.Desc
}

func newStatsCollector(db DB, clk clock.Clock, log *slog.Logger) *statsCollector {
	return &statsCollector{
		db: db, clock: clk, log: log,
		pendingDesc: prometheus.NewDesc("paymentsapi_outbox_pending_events",
			"Outbox events not yet published and not parked (including those waiting behind a parked event of their payment).", nil, nil),
		oldestDesc: prometheus.NewDesc("paymentsapi_outbox_oldest_pending_age_seconds",
			"Age of the oldest pending outbox event, 0 when none: how far publishing lags behind.", nil, nil),
		parkedDesc: prometheus.NewDesc("paymentsapi_outbox_parked_events",
			"Outbox events the relay gave up on; kept for a person to look at and unpark.", nil, nil),
	}
}

// Describe sends the descriptors of the gauges.
func (c *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.pendingDesc
	ch <- c.oldestDesc
	ch <- c.parkedDesc
}

// Collect reads the counts and sends the gauges.
func (c *statsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var (
		pending, parked int64
		oldest          *time.Time
	)
	err := c.db.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE parked_at IS NULL),
		       min(created_at) FILTER (WHERE parked_at IS NULL),
		       count(*) FILTER (WHERE parked_at IS NOT NULL)
		FROM outbox_events
		WHERE published_at IS NULL`).Scan(&pending, &oldest, &parked)
	if err != nil {
		c.log.WarnContext(ctx, "could not read the outbox backlog for metrics", "error", err)
		return
	}
	age := 0.0
	if oldest != nil {
		age = max(c.clock.Now().Sub(*oldest), 0).Seconds()
	}
	ch <- prometheus.MustNewConstMetric(c.pendingDesc, prometheus.GaugeValue, float64(pending))
	ch <- prometheus.MustNewConstMetric(c.oldestDesc, prometheus.GaugeValue, age)
	ch <- prometheus.MustNewConstMetric(c.parkedDesc, prometheus.GaugeValue, float64(parked))
}
