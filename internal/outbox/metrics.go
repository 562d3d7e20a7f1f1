package outbox

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the relay's Prometheus metrics, of this instance's relay
// (package outbox/stream or outbox/poll; its backlog gauges, read from the
// database, are the reader's NewStatsCollector's). No label carries an id.
//
//	paymentsapi_outbox_published_total
//	paymentsapi_outbox_publish_failures_total     failures booked on a row (not those of a broker outage)
//	paymentsapi_outbox_parked_total
//	paymentsapi_outbox_publish_lag_seconds        from the event's creation to its publication
//	paymentsapi_outbox_broker_unavailable         1 while the relay pauses for a broker outage, else 0
type Metrics struct {
	// Published counts events this instance published.
	Published prometheus.Counter
	// Failures counts failed publish attempts (not those of a broker outage).
	Failures prometheus.Counter
	// Parked counts events this instance parked.
	Parked prometheus.Counter
	// Lag measures the time from an event's creation to its publication.
	Lag prometheus.Histogram
	// BrokerUnavailable is 1 while the relay pauses because publishes fail
	// with ErrBrokerUnavailable, else 0.
	BrokerUnavailable prometheus.Gauge
}

// BacklogCountCap bounds the counts of the backlog gauges.
const BacklogCountCap = 100_000

// ParkedCountSQL counts the parked events that failed (not those waiting
// behind them), up to $1 (BacklogCountCap), for a reader's backlog
// collector.
const ParkedCountSQL = `(SELECT count(*) FROM (SELECT FROM outbox_parked WHERE last_error IS NOT NULL LIMIT $1) p)`

// Backlog is one reading of a reader's backlog, for its gauges
// (NewBacklogCollector).
type Backlog struct {
	// OldestPendingAge is how long the oldest event still to publish has
	// waited, as the reader can tell; 0 when none waits.
	OldestPendingAge time.Duration
	// Parked counts the parked events that failed (ParkedCountSQL).
	Parked int64
	// Own are the values of the reader's own gauges, in the order of their
	// descriptors; nil leaves a gauge out of this scrape.
	Own []*float64
}

// NewBacklogCollector returns the gauges of a reader's backlog, which read
// reads from the database on each scrape (the same on every instance:
// aggregate them with max):
//
//	paymentsapi_outbox_oldest_pending_age_seconds how long the oldest event still to publish has waited; 0 when none waits
//	paymentsapi_outbox_parked_events              events parked after failing (those waiting behind them not counted), up to BacklogCountCap
//
// and the reader's own (own, whose values read returns in Backlog.Own).
func NewBacklogCollector(log *slog.Logger, read func(ctx context.Context) (Backlog, error), own ...*prometheus.Desc) prometheus.Collector {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &backlogCollector{
		log: log, read: read, own: own,
		oldest: prometheus.NewDesc("paymentsapi_outbox_oldest_pending_age_seconds",
			"How long the oldest outbox event its relay has still to publish has waited (the stream: since the last transaction it confirmed committed, while it is behind); 0 when none waits.", nil, nil),
		parked: prometheus.NewDesc("paymentsapi_outbox_parked_events",
			"Outbox events the relay gave up on, counted up to the cap; kept for a person to look at and unpark.", nil, nil),
	}
}

type backlogCollector struct {
	log            *slog.Logger
	read           func(ctx context.Context) (Backlog, error)
	oldest, parked *prometheus.Desc
	own            []*prometheus.Desc
}

// Describe sends the descriptors of the gauges.
func (c *backlogCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.oldest
	ch <- c.parked
	for _, d := range c.own {
		ch <- d
	}
}

// Collect reads the backlog.
func (c *backlogCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	b, err := c.read(ctx)
	if err != nil {
		c.log.WarnContext(ctx, "could not read the outbox relay's backlog for metrics", "error", err)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, max(b.OldestPendingAge, 0).Seconds())
	ch <- prometheus.MustNewConstMetric(c.parked, prometheus.GaugeValue, float64(b.Parked))
	for i, d := range c.own {
		if i < len(b.Own) && b.Own[i] != nil {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, *b.Own[i])
		}
	}
}

// NewMetrics creates the relay's metrics and registers them on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Published: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "paymentsapi_outbox_published_total",
			Help: "Outbox events published by this instance's relay.",
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
		BrokerUnavailable: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "paymentsapi_outbox_broker_unavailable",
			Help: "1 while this instance's outbox relay pauses because the broker is unavailable (no attempt is counted meanwhile), else 0.",
		}),
	}
	reg.MustRegister(m.Published, m.Failures, m.Parked, m.Lag, m.BrokerUnavailable)
	return m
}

// The methods below are how the relay counts; each is a no-op on nil
// Metrics.

// CountPublished counts one event published, lag after its creation.
func (m *Metrics) CountPublished(lag time.Duration) {
	if m == nil {
		return
	}
	m.Published.Inc()
	m.Lag.Observe(max(lag, 0).Seconds())
}

// CountFailure counts one failed publish of an event (not a broker outage).
func (m *Metrics) CountFailure() {
	if m != nil {
		m.Failures.Inc()
	}
}

// CountParked counts one event parked.
func (m *Metrics) CountParked() {
	if m != nil {
		m.Parked.Inc()
	}
}

// SetBrokerUnavailable sets the broker gauge: 1 while the relay pauses for
// an outage.
func (m *Metrics) SetBrokerUnavailable(down bool) {
	if m == nil {
		return
	}
	v := 0.0
	if down {
		v = 1
	}
	m.BrokerUnavailable.Set(v)
}
