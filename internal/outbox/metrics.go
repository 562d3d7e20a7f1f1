package outbox

import (
	"context"
	"fmt"
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
//	paymentsapi_outbox_pending_events             rows not yet published and not parked, counted up to BacklogCountCap
//	paymentsapi_outbox_oldest_pending_age_seconds age of the earliest written of them (0 when none): the publish lag
//	paymentsapi_outbox_parked_events              rows the relay gave up on, counted up to BacklogCountCap
//
// Each scrape reads at most BacklogCountCap index entries per count and one
// for the age, however large the backlog: a count that reads
// BacklogCountCap means "at least that many". The age is that of the
// pending row inserted first (by seq, from an index); rows are inserted in
// the order of their creation times up to the clock skew between instances.
//
// Counters, a histogram and a gauge, of this instance's relay:
//
//	paymentsapi_outbox_published_total
//	paymentsapi_outbox_publish_failures_total     failures booked on a row (not those of a broker outage)
//	paymentsapi_outbox_parked_total
//	paymentsapi_outbox_publish_lag_seconds        from the event's creation to its publication
//	paymentsapi_outbox_broker_unavailable         1 while the relay pauses for a broker outage, else 0
type Metrics struct {
	// Published counts events this instance published and marked.
	Published prometheus.Counter
	// Failures counts failed publish attempts (each booked on its row).
	Failures prometheus.Counter
	// Parked counts rows this instance parked.
	Parked prometheus.Counter
	// Lag measures the time from an event's creation to its publication.
	Lag prometheus.Histogram
	// BrokerUnavailable is 1 while the relay pauses because publishes fail
	// with ErrBrokerUnavailable, else 0.
	BrokerUnavailable prometheus.Gauge
}

// BacklogCountCap bounds the pending and parked counts of the gauges.
const BacklogCountCap = 100_000

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
		BrokerUnavailable: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "paymentsapi_outbox_broker_unavailable",
			Help: "1 while this instance's outbox relay pauses because the broker is unavailable (no attempt is counted meanwhile), else 0.",
		}),
	}
	reg.MustRegister(m.Published, m.Failures, m.Parked, m.Lag, m.BrokerUnavailable, newStatsCollector(db, clk, log, BacklogCountCap))
	return m
}

// The methods below are how a relay counts (this package's, and the
// stream's in package outbox/stream); each is a no-op on nil Metrics.

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

// statsCollector reads the outbox's backlog from the database on scrape.
type statsCollector struct {
	db                                  DB
	clock                               clock.Clock
	log                                 *slog.Logger
	countCap                            int
	pendingDesc, oldestDesc, parkedDesc *prometheus.Desc
}

func newStatsCollector(db DB, clk clock.Clock, log *slog.Logger, countCap int) *statsCollector {
	return &statsCollector{
		db: db, clock: clk, log: log, countCap: countCap,
		pendingDesc: prometheus.NewDesc("paymentsapi_outbox_pending_events",
			fmt.Sprintf("Outbox events not yet published and not parked (including those waiting behind a parked event of their payment), counted up to %d.", countCap), nil, nil),
		oldestDesc: prometheus.NewDesc("paymentsapi_outbox_oldest_pending_age_seconds",
			"Age of the oldest pending outbox event, 0 when none: how far publishing lags behind.", nil, nil),
		parkedDesc: prometheus.NewDesc("paymentsapi_outbox_parked_events",
			fmt.Sprintf("Outbox events the relay gave up on, counted up to %d; kept for a person to look at and unpark.", countCap), nil, nil),
	}
}

// backlogSQL reads the gauges with $1 as the count cap. Each part reads a
// bounded number of rows: the counts stop at the cap (partial indexes hold
// exactly the pending rows and exactly the parked ones), and the age is the
// first entry of outbox_events_claimable_idx (seq). The pending rows are
// counted in seq order, the index's, so that no plan looks for them in the
// table instead. When they seem common (a large backlog) a sequential scan
// seems to find the cap's worth soon, but it reads the published rows
// before them; and since pages keep room for updates (fillfactor, 00015),
// a row's later versions land among newer rows, the table follows seq less
// closely, and the index looks dearer to the planner than it is.
const backlogSQL = `
		SELECT
		    (SELECT count(*) FROM (
		        SELECT 1 FROM outbox_events
		        WHERE published_at IS NULL AND parked_at IS NULL
		        ORDER BY seq
		        LIMIT $1) pending),
		    (SELECT created_at FROM outbox_events
		     WHERE published_at IS NULL AND parked_at IS NULL
		     ORDER BY seq
		     LIMIT 1),
		    (SELECT count(*) FROM (
		        SELECT 1 FROM outbox_events
		        WHERE published_at IS NULL AND parked_at IS NOT NULL
		        LIMIT $1) parked)`

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
	err := c.db.QueryRow(ctx, backlogSQL, c.countCap).Scan(&pending, &oldest, &parked)
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
