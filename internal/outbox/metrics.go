package outbox

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the relay's Prometheus metrics, of this instance's relay
// (package outbox/stream; its backlog gauges, read from the database, are
// stream.NewStatsCollector's). No label carries an id.
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

// BacklogCountCap bounds the parked count of the backlog gauges.
const BacklogCountCap = 100_000

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
