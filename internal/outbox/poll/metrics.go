package poll

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/outbox"
)

// NewStatsCollector returns the gauges of the poller's backlog
// (outbox.NewBacklogCollector), read from the database on each scrape:
//
//	paymentsapi_outbox_pending_events             events after the position, up to outbox.BacklogCountCap
//	paymentsapi_outbox_oldest_pending_age_seconds the age of the first event after the position; 0 when there is none
//	paymentsapi_outbox_parked_events              events parked after failing
//
// Each reads the order_xid index from the position on.
func NewStatsCollector(db outbox.DB, clk clock.Clock, log *slog.Logger) prometheus.Collector {
	pending := prometheus.NewDesc("paymentsapi_outbox_pending_events",
		"Outbox events the polling relay has still to publish (after its position), counted up to the cap.", nil, nil)
	return outbox.NewBacklogCollector(log, func(ctx context.Context) (outbox.Backlog, error) {
		var (
			b      outbox.Backlog
			n      int64
			oldest *time.Time
		)
		rows, err := db.Query(ctx, `
			WITH p AS (SELECT order_xid, seq FROM outbox_poll_position)
			SELECT (SELECT count(*) FROM (SELECT FROM outbox_events e, p
			                              WHERE e.order_xid >= p.order_xid AND (e.order_xid, e.seq) > (p.order_xid, p.seq) LIMIT $1) x),
			       (SELECT e.created_at FROM outbox_events e, p
			        WHERE e.order_xid >= p.order_xid AND (e.order_xid, e.seq) > (p.order_xid, p.seq)
			        ORDER BY e.order_xid, e.seq LIMIT 1),
			       `+outbox.ParkedCountSQL, outbox.BacklogCountCap)
		if err == nil {
			_, err = pgx.ForEachRow(rows, []any{&n, &oldest, &b.Parked}, func() error { return nil })
		}
		if err != nil {
			return b, err
		}
		if oldest != nil {
			b.OldestPendingAge = clk.Now().Sub(*oldest)
		}
		v := float64(n)
		b.Own = []*float64{&v}
		return b, nil
	}, pending)
}
