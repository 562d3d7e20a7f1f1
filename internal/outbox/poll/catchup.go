package poll

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/paymentsapi/paymentsapi/internal/outbox"
)

// catchUpRule is what the relay publishes the first time it runs on a
// database: the events no reader will have published. Those created since
// outbox.CatchupMargin before the stream's oldest recorded position (the
// stream published the rest), or, with none (a new database, or one the
// polling relay of releases before migration 00033 published), those it
// left unpublished, which on a new database is every one.
const catchUpRule = `
	CASE WHEN (SELECT since FROM p) IS NOT NULL THEN created_at >= (SELECT since FROM p)
	     ELSE published_at IS NULL AND parked_at IS NULL END`

// catchUpSQL chooses the events of catchUpRule written before migration
// 00041 (no order_xid): they all committed before any event with one (the
// migration's ALTER waited for the transactions writing them). It runs
// once per database, and reads the outbox once.
const catchUpSQL = `
	WITH p AS (SELECT min(committed_at) - %d * interval '1 microsecond' AS since FROM outbox_stream_positions)
	SELECT id::text FROM outbox_events WHERE order_xid IS NULL AND ` + catchUpRule + `
	ORDER BY seq`

// startSQL is where the first polls start: before the first event with an
// order_xid that catchUpRule chooses, and never after the snapshot's xmin ($1),
// below which every transaction had ended.
const startSQL = `
	WITH p AS (SELECT min(committed_at) - %d * interval '1 microsecond' AS since FROM outbox_stream_positions)
	SELECT LEAST($1::text::xid8, (SELECT min(order_xid) FROM outbox_events WHERE order_xid IS NOT NULL AND ` + catchUpRule + `))::text`

// catchUp publishes, the first time the relay runs on a database, the
// events catchUpSQL chooses, and returns the first position: (x, 0), x
// startSQL's, before the first event the polls will read. The polls then
// publish the events with an xid in their order (an event an earlier
// reader published may be published again: at least once). The snapshot
// only chooses: the events are published after its transaction ended, read
// again page by page, so that no transaction stays open across a publish.
// The position is recorded only once they are all published: a relay that
// dies meanwhile catches up again.
func (r *Relay) catchUp(ctx context.Context, conn *pgx.Conn) (position, error) {
	var (
		ids   []string
		start string
	)
	margin := outbox.CatchupMargin.Microseconds()
	cctx, cancel := context.WithTimeout(ctx, catchupTimeout)
	defer cancel()
	err := pgx.BeginTxFunc(cctx, conn, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var horizon string
		if err := tx.QueryRow(cctx, `SELECT pg_snapshot_xmin(pg_current_snapshot())::text`).Scan(&horizon); err != nil {
			return err
		}
		if err := tx.QueryRow(cctx, fmt.Sprintf(startSQL, margin), horizon).Scan(&start); err != nil {
			return err
		}
		rows, err := tx.Query(cctx, fmt.Sprintf(catchUpSQL, margin))
		if err != nil {
			return err
		}
		ids, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	if err != nil {
		return position{}, fmt.Errorf("outbox poll: choose the events to catch up: %w", err)
	}
	r.log.InfoContext(ctx, "outbox poll: the first poll of this database; publishing what no reader published before it", "events_before_00041", len(ids), "from_xid", start)
	for len(ids) > 0 {
		page := ids[:min(len(ids), r.cfg.BatchSize)]
		ids = ids[len(page):]
		events, err := outbox.Load(ctx, conn, page)
		if err != nil {
			return position{}, err
		}
		if _, err := r.send.Send(ctx, events); err != nil {
			return position{}, err
		}
	}
	p := position{seq: 0}
	if p.xid, err = strconv.ParseUint(start, 10, 64); err != nil {
		return position{}, err
	}
	qctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	if _, err := conn.Exec(qctx, `
		INSERT INTO outbox_poll_position (order_xid, seq, updated_at) VALUES ($1::text::xid8, 0, $2)
		ON CONFLICT (one) DO NOTHING`, start, r.clock.Now()); err != nil {
		return position{}, fmt.Errorf("outbox poll: record the first position: %w", err)
	}
	return p, nil
}
