package outbox_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/paymentsapi/paymentsapi/internal/outbox"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
)

// seedBacklog inserts n pending rows, one per payment, due at due, then
// ANALYZEs the table so that the planner knows its size.
func seedBacklog(t *testing.T, pool *pgxpool.Pool, prefix string, n int, due time.Time) {
	t.Helper()
	_, err := pool.Exec(context.Background(), `
		INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload, created_at, next_attempt_at)
		SELECT gen_random_uuid(), 'payment', $1 || i, 'PaymentCreated', '{}', $2, $3
		FROM generate_series(1, $4) i`, prefix, t0, due, n)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(context.Background(), `ANALYZE outbox_events`); err != nil {
		t.Fatal(err)
	}
}

// TestQueriesReadOnlyWhatTheyNeed runs the relay's claim and the backlog
// gauges' query under EXPLAIN ANALYZE on a large outbox (published rows, a
// backlog waiting for its backoff, a few due rows), as custom and as generic
// plans (what a cached prepared statement may get): each reads a bounded
// number of rows, not the backlog.
func TestQueriesReadOnlyWhatTheyNeed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const backlog = 20000
	seedBacklog(t, e.pool, "published_", backlog, t0.Add(-time.Hour))
	// Published, then vacuumed as autovacuum would: a bitmap index scan
	// counts the entries of dead row versions too, which a vacuum removes.
	for _, sql := range []string{`UPDATE outbox_events SET published_at = $1, attempts = 1`, `VACUUM outbox_events`} {
		args := []any{t0.Add(-time.Hour)}
		if !strings.Contains(sql, "$1") {
			args = nil
		}
		if _, err := e.pool.Exec(context.Background(), sql, args...); err != nil {
			t.Fatal(err)
		}
	}
	seedBacklog(t, e.pool, "waiting_", backlog, t0.Add(time.Hour)) // backing off
	seedBacklog(t, e.pool, "due_", 10, t0.Add(-time.Second))
	const countCap = 1000
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		claim := pgtest.Explain(t, e.pool, mode, "timestamptz, int, timestamptz, uuid", outbox.ClaimSQL,
			t0.Format(time.RFC3339Nano), "100", t0.Add(30*time.Second).Format(time.RFC3339Nano), "01900000-0000-7000-8000-000000000000")
		if got := claim.RowsRead(); got > 200 {
			t.Errorf("claim (%s) read %v rows to claim 10 of %d pending:\n%s", mode, got, backlog+10, claim)
		}
		gauges := pgtest.Explain(t, e.pool, mode, "int", outbox.BacklogSQL, fmt.Sprint(countCap))
		if got := gauges.RowsRead(); got > countCap+100 {
			t.Errorf("backlog gauges (%s) read %v rows with a count cap of %d:\n%s", mode, got, countCap, gauges)
		}
	}
}

// TestClaimReadsNoBlockedTail (issue 9, item 8): the claim finds due heads
// without walking the events that wait behind an earlier unpublished event
// of their payment. With 20,000 payments whose PaymentCreated is parked and
// whose later events wait behind it, 5,000 whose PaymentCreated backs off
// with a due event behind it, and 10 due heads (3 of them with events
// behind), claiming reads next to nothing, as a custom and as a generic
// plan; a pass publishes exactly the 10 heads.
func TestClaimReadsNoBlockedTail(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	insert := func(prefix string, n int, eventType string, due time.Time) {
		t.Helper()
		_, err := e.pool.Exec(ctx, `
			INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload, created_at, next_attempt_at)
			SELECT gen_random_uuid(), 'payment', $1 || i, $2, '{}', $3, $4
			FROM generate_series(1, $5) i`, prefix, eventType, t0.Add(-time.Hour), due, n)
		if err != nil {
			t.Fatal(err)
		}
	}
	const blocked, backingOff = 20000, 5000
	insert("parked_", blocked, "PaymentCreated", t0.Add(-time.Hour))
	insert("backoff_", backingOff, "PaymentCreated", t0.Add(time.Hour))
	insert("due_", 10, "PaymentCreated", t0.Add(-time.Second))
	// The tails, written after their heads, all due.
	insert("parked_", blocked, "PaymentSucceeded", t0.Add(-time.Hour))
	insert("parked_", blocked, "RefundCreated", t0.Add(-time.Hour))
	insert("backoff_", backingOff, "PaymentSucceeded", t0.Add(-time.Hour))
	insert("due_", 3, "PaymentSucceeded", t0.Add(-time.Hour))
	_, err := e.pool.Exec(ctx, `
		UPDATE outbox_events SET parked_at = $1, attempts = 10, last_error = 'poison'
		WHERE aggregate_id LIKE 'parked\_%' AND event_type = 'PaymentCreated'`, t0.Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	// Vacuumed as autovacuum would: a bitmap index scan counts the entries
	// of the dead versions the parking left, which a vacuum removes.
	if _, err := e.pool.Exec(ctx, `VACUUM ANALYZE outbox_events`); err != nil {
		t.Fatal(err)
	}
	pgtest.ReadsAtMost(t, e.pool, 100, "timestamptz, int, timestamptz, uuid", outbox.ClaimSQL,
		t0.Format(time.RFC3339Nano), "100", t0.Add(30*time.Second).Format(time.RFC3339Nano), "01900000-0000-7000-8000-000000000000")
	rec := &recorder{}
	mustRunOnce(t, e.relay(rec.publisher("r1"), outbox.RelayConfig{}), 10)
	for _, ev := range rec.published() {
		if !strings.HasPrefix(ev.AggregateID, "due_") || ev.Type != "PaymentCreated" {
			t.Errorf("published %s %s", ev.AggregateID, ev.Type)
		}
	}
}

// TestClaimStaysCheapOnStaleStatistics: the planner's statistics were
// taken while the relay kept up (20,000 events, all published), and now a
// burst has left 3,000 due before autovacuum caught up. The claim may read
// each due head once (the planner, believing few rows due, sorts them rather
// than walking the index in order), but no more: with a NOT EXISTS for the
// ordering rule, the planner ran it as a nested-loop anti join that walked
// every unpublished row for every candidate (9 million rows here; 90,000
// rows and 200 ms per claim in make bench, issue 8).
func TestClaimStaysCheapOnStaleStatistics(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	seedBacklog(t, e.pool, "published_", 20000, t0.Add(-time.Hour)) // and ANALYZE
	if _, err := e.pool.Exec(ctx, `UPDATE outbox_events SET published_at = $1, attempts = 1`, t0.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{
		`VACUUM ANALYZE outbox_events`,
		`ALTER TABLE outbox_events SET (autovacuum_enabled = false)`, // keep the statistics stale
	} {
		if _, err := e.pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	_, err := e.pool.Exec(ctx, `
		INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload, created_at, next_attempt_at)
		SELECT gen_random_uuid(), 'payment', 'due_' || i, 'PaymentCreated', '{}', $1, $1
		FROM generate_series(1, 3000) i`, t0.Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	pgtest.ReadsAtMost(t, e.pool, 3*3000, "timestamptz, int, timestamptz, uuid", outbox.ClaimSQL,
		t0.Format(time.RFC3339Nano), "100", t0.Add(30*time.Second).Format(time.RFC3339Nano), "01900000-0000-7000-8000-000000000000")
}

// TestBacklogCountsAreCapped: the pending and parked gauges count up to
// their cap, so that a scrape reads a bounded number of rows; the age is
// still that of the oldest pending row.
func TestBacklogCountsAreCapped(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.add("pay_a:PaymentCreated", "pay_b:PaymentCreated", "pay_c:PaymentCreated", "pay_d:PaymentCreated", "pay_e:PaymentCreated")
	e.clock.Advance(time.Minute)
	e.add("pay_f:PaymentCreated", "pay_g:PaymentCreated", "pay_h:PaymentCreated", "pay_i:PaymentCreated")
	if _, err := e.pool.Exec(context.Background(), `UPDATE outbox_events SET parked_at = $1 WHERE aggregate_id > 'pay_e'`, e.clock.Now()); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Minute)
	reg := prometheus.NewRegistry()
	reg.MustRegister(outbox.NewStatsCollector(e.pool, e.clock, 3))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		got[mf.GetName()] = mf.GetMetric()[0].GetGauge().GetValue()
	}
	want := map[string]float64{
		"paymentsapi_outbox_pending_events":             3, // 5, capped
		"paymentsapi_outbox_parked_events":              3, // 4, capped
		"paymentsapi_outbox_oldest_pending_age_seconds": 120,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("gauges = %v, want %v", got, want)
	}
}

// TestHeadTriggersProbeTheirAggregate: the triggers that keep the head flag
// (migration 00011) look up the earlier unpublished events of one
// aggregate. On statistics taken while the relay kept up, and a burst of
// 3,000 unpublished events since, writing one more event and publishing one
// must each read a few rows, not walk the table (a trigger that reads the
// published rows, for one, fails it).
func TestHeadTriggersProbeTheirAggregate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	seedBacklog(t, e.pool, "published_", 20000, t0.Add(-time.Hour)) // and ANALYZE
	for _, sql := range []string{
		`UPDATE outbox_events SET published_at = now()`,
		`VACUUM ANALYZE outbox_events`,
		`ALTER TABLE outbox_events SET (autovacuum_enabled = false)`, // keep the statistics stale
	} {
		if _, err := e.pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	seedBacklogUnanalyzed := `
		INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload, created_at, next_attempt_at)
		SELECT gen_random_uuid(), 'payment', 'burst_' || i, 'PaymentCreated', '{}', $1, $1
		FROM generate_series(1, 3000) i`
	if _, err := e.pool.Exec(ctx, seedBacklogUnanalyzed, t0); err != nil {
		t.Fatal(err)
	}
	// Each statement in a transaction of its own, on a connection of its
	// own: pg_stat_xact_user_tables then counts what that statement read
	// (the counters a backend has not flushed yet would count too).
	for name, sql := range map[string]string{
		"new event": `INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload, created_at, next_attempt_at)
			VALUES (gen_random_uuid(), 'payment', 'burst_2999', 'PaymentSucceeded', '{}', now(), now())`,
		"publish": `UPDATE outbox_events SET published_at = now()
			WHERE id = (SELECT id FROM outbox_events WHERE aggregate_type = 'payment' AND aggregate_id = 'burst_17' AND published_at IS NULL)`,
	} {
		conn, err := pgx.ConnectConfig(ctx, e.pool.Config().ConnConfig.Copy())
		if err != nil {
			t.Fatal(err)
		}
		err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, sql); err != nil {
				return err
			}
			var read int64
			err := tx.QueryRow(ctx, `
				SELECT COALESCE(seq_tup_read, 0) + COALESCE(idx_tup_fetch, 0)
				FROM pg_stat_xact_user_tables WHERE relname = 'outbox_events'`).Scan(&read)
			if err != nil {
				return err
			}
			if read > 50 {
				t.Errorf("%s: read %d rows of outbox_events", name, read)
			}
			return nil
		})
		_ = conn.Close(ctx)
		if err != nil {
			t.Fatal(err)
		}
	}
}
