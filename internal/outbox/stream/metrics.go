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

// NewStatsCollector returns the gauges of the stream's backlog
// (outbox.NewBacklogCollector), read from the database on each scrape:
//
//	paymentsapi_outbox_stream_behind_bytes        WAL the slot has not confirmed (absent while there is no slot)
//	paymentsapi_outbox_oldest_pending_age_seconds how long ago the last transaction the relay confirmed committed, while the slot is behind; else 0
//	paymentsapi_outbox_parked_events              events parked after failing
//
// The age has the position's grain (RelayConfig.PositionInterval). There
// is no count of pending events: nothing on a row says whether it was
// published.
func NewStatsCollector(db outbox.DB, slot string, clk clock.Clock, log *slog.Logger) prometheus.Collector {
	if slot == "" {
		slot = DefaultSlot
	}
	behind := prometheus.NewDesc("paymentsapi_outbox_stream_behind_bytes",
		"WAL the outbox stream's replication slot has not confirmed: what its relay has still to read and publish, and the server must keep.", nil, nil)
	return outbox.NewBacklogCollector(log, func(ctx context.Context) (outbox.Backlog, error) {
		var (
			b         outbox.Backlog
			bytes     *int64
			committed *time.Time
		)
		rows, err := db.Query(ctx, `
			SELECT (SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), confirmed_flush_lsn)::bigint
			        FROM pg_replication_slots WHERE slot_name = $2 AND database = current_database()),
			       (SELECT committed_at FROM outbox_stream_positions WHERE slot = $2),
			       `+outbox.ParkedCountSQL, outbox.BacklogCountCap, slot)
		if err == nil {
			_, err = pgx.ForEachRow(rows, []any{&bytes, &committed, &b.Parked}, func() error { return nil })
		}
		if err != nil {
			return b, err
		}
		if bytes != nil && *bytes > 0 && committed != nil {
			b.OldestPendingAge = clk.Now().Sub(*committed)
		}
		if bytes != nil {
			v := float64(max(*bytes, 0))
			b.Own = []*float64{&v}
		}
		return b, nil
	}, behind)
}
