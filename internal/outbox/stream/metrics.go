package stream

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/outbox"
)

// The relay counts what it does on outbox.Metrics, under the names the
// polling relay had (published, failures, parked, lag,
// broker_unavailable), so that dashboards read the same. Its backlog has
// no flags on rows to count: NewStatsCollector reads the slot instead.

// statsCollector reads a slot's backlog on each scrape.
type statsCollector struct {
	db                                 outbox.DB
	slot                               string
	clock                              clock.Clock
	log                                *slog.Logger
	behindDesc, oldestDesc, parkedDesc *prometheus.Desc
}

// NewStatsCollector returns the gauges of the stream's backlog, read from
// the database on each scrape (the same on every instance: aggregate them
// with max):
//
//	paymentsapi_outbox_stream_behind_bytes        WAL the slot has not confirmed (absent while there is no slot)
//	paymentsapi_outbox_oldest_pending_age_seconds how long ago the last transaction the relay confirmed committed, while the slot is behind; else 0
//	paymentsapi_outbox_parked_events              events parked after failing (those waiting behind them not counted), up to outbox.BacklogCountCap
//
// The age has the position's grain (RelayConfig.PositionInterval). There
// is no count of pending events: nothing on a row says whether it was
// published.
func NewStatsCollector(db outbox.DB, slot string, clk clock.Clock, log *slog.Logger) prometheus.Collector {
	if slot == "" {
		slot = DefaultSlot
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &statsCollector{
		db: db, slot: slot, clock: clk, log: log,
		behindDesc: prometheus.NewDesc("paymentsapi_outbox_stream_behind_bytes",
			"WAL the outbox stream's replication slot has not confirmed: what its relay has still to read and publish, and the server must keep.", nil, nil),
		oldestDesc: prometheus.NewDesc("paymentsapi_outbox_oldest_pending_age_seconds",
			"While the outbox stream is behind, how long ago the last transaction its relay confirmed committed; 0 when it is not behind.", nil, nil),
		parkedDesc: prometheus.NewDesc("paymentsapi_outbox_parked_events",
			"Outbox events the relay gave up on, counted up to the cap; kept for a person to look at and unpark.", nil, nil),
	}
}

// Describe sends the descriptors of the gauges.
func (c *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.behindDesc
	ch <- c.oldestDesc
	ch <- c.parkedDesc
}

// Collect reads the slot, the position and the parked count.
func (c *statsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var (
		behind    *int64
		committed *time.Time
		parked    int64
	)
	rows, err := c.db.Query(ctx, `
		SELECT (SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), confirmed_flush_lsn)::bigint
		        FROM pg_replication_slots WHERE slot_name = $1 AND database = current_database()),
		       (SELECT committed_at FROM outbox_stream_positions WHERE slot = $1),
		       (SELECT count(*) FROM (SELECT FROM outbox_parked WHERE last_error IS NOT NULL LIMIT $2) p)`,
		c.slot, outbox.BacklogCountCap)
	if err == nil {
		_, err = pgx.ForEachRow(rows, []any{&behind, &committed, &parked}, func() error { return nil })
	}
	if err != nil {
		c.log.WarnContext(ctx, "could not read the outbox stream's backlog for metrics", "error", err)
		return
	}
	age := 0.0
	if behind != nil && *behind > 0 && committed != nil {
		age = max(c.clock.Now().Sub(*committed), 0).Seconds()
	}
	if behind != nil {
		ch <- prometheus.MustNewConstMetric(c.behindDesc, prometheus.GaugeValue, float64(max(*behind, 0)))
	}
	ch <- prometheus.MustNewConstMetric(c.oldestDesc, prometheus.GaugeValue, age)
	ch <- prometheus.MustNewConstMetric(c.parkedDesc, prometheus.GaugeValue, float64(parked))
}
