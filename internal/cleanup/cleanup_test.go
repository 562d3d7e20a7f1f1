package cleanup

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

var now = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

var policy = Policy{ReplayTTL: 24 * time.Hour, MetadataTTL: 720 * time.Hour, OutboxRetention: 168 * time.Hour, EventRetention: 168 * time.Hour,
	InboxRetention: 720 * time.Hour, BatchSize: 500}

// seed stores n payments (their state does not matter to clean-up) with
// keys created at created; completed
// keys carry a stored answer completed at completed.
func seed(t *testing.T, db *pgxpool.Pool, prefix string, n int, created time.Time, completed *time.Time, lease *time.Time) {
	t.Helper()
	_, err := db.Exec(context.Background(), `
		WITH p AS (
		    INSERT INTO payments (id, tenant_id, account_id, amount_minor, currency, merchant_reference,
		        payment_method, channel, state, created_at, updated_at)
		    SELECT $1::text || i, 't', 'acc', 100, 'EUR', $1::text || i, 'pm_card_visa', 'web', 'RECEIVED', $3, $3
		    FROM generate_series(1, $2) i
		)
		INSERT INTO idempotency_keys (tenant_id, operation, idempotency_key, fingerprint, resource_type, resource_id,
		    lease_expires_at, response_status, response_headers, response_body, created_at, completed_at)
		SELECT 't', 'create_payment', $1::text || i, '\x01', 'payment', $1::text || i, $5,
		       CASE WHEN $4::timestamptz IS NULL THEN NULL ELSE 201 END,
		       CASE WHEN $4::timestamptz IS NULL THEN NULL ELSE '{"Content-Type":"application/json"}'::jsonb END,
		       CASE WHEN $4::timestamptz IS NULL THEN NULL ELSE '{"paymentId":"x"}'::bytea END,
		       $3, $4
		FROM generate_series(1, $2) i`, prefix, n, created, completed, lease)
	if err != nil {
		t.Fatal(err)
	}
}

func count(t *testing.T, db *pgxpool.Pool, sql string) int {
	t.Helper()
	var n int
	if err := db.QueryRow(context.Background(), sql).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// seedEvents stores n outbox events created at created, per to an
// aggregate (prefix1, prefix2, ...), with UUIDv7 ids of created's
// millisecond, as ids.NewEventID makes them: outbox.DeletePublished finds
// old events by id.
func seedEvents(t *testing.T, db *pgxpool.Pool, prefix string, n, per int, created time.Time) {
	t.Helper()
	_, err := db.Exec(context.Background(), `
		INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload, created_at, next_attempt_at)
		SELECT (lpad(to_hex(floor(extract(epoch FROM $4::timestamptz) * 1000)::bigint), 12, '0')
		        || '7' || substr(md5($1::text || i), 1, 3) || '8' || substr(md5($1::text || i), 4, 15))::uuid,
		       'payment', $1::text || ((i - 1) / $3 + 1), 'PaymentCreated', '{}', $4, $4
		FROM generate_series(1, $2) i
		ORDER BY i`, prefix, n, per, created)
	if err != nil {
		t.Fatal(err)
	}
}

// park parks the events of the aggregates named prefix..., as the stream
// relay does: each aggregate's first event failed (last_error), the later
// ones wait behind it (waits_for).
func park(t *testing.T, db *pgxpool.Pool, prefix string, at time.Time) {
	t.Helper()
	_, err := db.Exec(context.Background(), `
		INSERT INTO outbox_parked (event_id, aggregate_type, aggregate_id, seq, attempts, last_error, waits_for, parked_at)
		SELECT e.id, e.aggregate_type, e.aggregate_id, e.seq,
		       CASE WHEN e.id = f.id THEN 10 ELSE 0 END,
		       CASE WHEN e.id = f.id THEN 'message too large' END,
		       CASE WHEN e.id <> f.id THEN f.id END,
		       $2
		FROM outbox_events e
		CROSS JOIN LATERAL (SELECT id FROM outbox_events f
		                    WHERE f.aggregate_type = e.aggregate_type AND f.aggregate_id = e.aggregate_id
		                    ORDER BY seq LIMIT 1) f
		WHERE starts_with(e.aggregate_id, $1)`, prefix, at)
	if err != nil {
		t.Fatal(err)
	}
}

// recordPosition records, as a stream relay does, that slot published
// everything committed before committed.
func recordPosition(t *testing.T, db *pgxpool.Pool, slot string, committed time.Time) {
	t.Helper()
	_, err := db.Exec(context.Background(), `
		INSERT INTO outbox_stream_positions (slot, committed_at, updated_at) VALUES ($1, $2, $2)
		ON CONFLICT (slot) DO UPDATE SET committed_at = EXCLUDED.committed_at, updated_at = EXCLUDED.updated_at`, slot, committed)
	if err != nil {
		t.Fatal(err)
	}
}

// TestCleanupTouchesOnlyExpiredFinishedRecordsInBatches: a pass erases and
// deletes expired finished keys, in batches, and deletes outbox events
// past retention once the stream relay has recorded a position (nothing
// says which event was published: what a catch-up could still need is
// kept, and, with no position, everything). Parked events stay, however
// old; so do events inside the retention.
func TestCleanupTouchesOnlyExpiredFinishedRecordsInBatches(t *testing.T) {
	db := pgtest.NewPool(t)
	ts := func(d time.Duration) *time.Time { v := now.Add(d); return &v }
	long := -800 * 24 * time.Hour                                                // older than every retention
	seed(t, db, "gone_", 3000, now.Add(long), ts(long), nil)                     // past metadata retention
	seed(t, db, "erased_", 1200, now.Add(-48*time.Hour), ts(-47*time.Hour), nil) // past replay window only
	seed(t, db, "fresh_", 50, now.Add(-time.Hour), ts(-time.Hour), nil)          // inside the window
	seed(t, db, "inflight_", 20, now.Add(long), nil, ts(time.Minute))
	seed(t, db, "unknown_", 20, now.Add(long), nil, nil)
	seed(t, db, "retryable_", 20, now.Add(long), nil, nil)
	seedEvents(t, db, "old_", 700, 1, now.Add(long))                               // past retention
	seedEvents(t, db, "parked_", 100, 2, now.Add(long))                            // past retention, parked
	seedEvents(t, db, "kept_", 100, 1, now.Add(-policy.OutboxRetention+time.Hour)) // inside the retention
	seedEvents(t, db, "recent_", 100, 1, now.Add(-time.Minute))
	park(t, db, "parked_", now.Add(long/2))
	events := func(prefix string) int {
		t.Helper()
		var n int
		err := db.QueryRow(context.Background(), `SELECT count(*) FROM outbox_events WHERE starts_with(aggregate_id, $1)`, prefix).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	// No relay has recorded a position yet: its first catch-up publishes
	// every event there is, so none may go.
	j := New(db, clock.NewFake(now), policy, slog.New(slog.NewTextHandler(io.Discard, nil)))
	st, err := j.RunOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.KeysDeleted != 3000 || st.EventsDeleted != 0 {
		t.Errorf("stats %+v: want 3000 keys and no events deleted (no position recorded)", st)
	}
	if st.LargestBatchRows > policy.BatchSize || st.Batches < 3000/policy.BatchSize+1200/policy.BatchSize {
		t.Errorf("stats %+v: not in batches of at most %d", st, policy.BatchSize)
	}
	if n := count(t, db, `SELECT count(*) FROM idempotency_keys WHERE idempotency_key LIKE 'gone_%'`); n != 0 {
		t.Errorf("%d keys past retention survived", n)
	}
	if n := count(t, db, `SELECT count(*) FROM idempotency_keys WHERE idempotency_key LIKE 'erased_%' AND response_body IS NULL AND response_status IS NOT NULL AND fingerprint IS NOT NULL`); n != 1200 {
		t.Errorf("%d keys past the replay window have their metadata without their body, want 1200", n)
	}
	if n := count(t, db, `SELECT count(*) FROM idempotency_keys WHERE idempotency_key LIKE 'fresh_%' AND response_body IS NOT NULL`); n != 50 {
		t.Errorf("%d keys inside the window kept their body, want 50", n)
	}
	if n := count(t, db, `SELECT count(*) FROM idempotency_keys WHERE idempotency_key ~ '^(inflight|unknown|retryable)_'`); n != 60 {
		t.Errorf("%d unfinished keys survived, want all 60", n)
	}
	if n := count(t, db, `SELECT count(*) FROM payments`); n != 4310 {
		t.Errorf("payments = %d: payments are never deleted", n)
	}
	if n := count(t, db, `SELECT count(*) FROM outbox_events`); n != 1000 {
		t.Errorf("%d events left with no position recorded, want all 1000", n)
	}

	// The relay has caught up and streams: it recorded a position a
	// moment ago. The events past retention go, in batches, but not the
	// parked ones.
	recordPosition(t, db, "paymentsapi_outbox_test", now.Add(-time.Second))
	st, err = j.RunOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.EventsDeleted != 700 || st.Batches != 2 || st.LargestBatchRows != policy.BatchSize || st.KeysDeleted+st.BodiesErased != 0 {
		t.Errorf("stats %+v: want 700 events deleted, in batches of %d", st, policy.BatchSize)
	}
	for prefix, want := range map[string]int{"old_": 0, "parked_": 100, "kept_": 100, "recent_": 100} {
		if n := events(prefix); n != want {
			t.Errorf("%d events %s... left, want %d", n, prefix, want)
		}
	}
	if n := count(t, db, `SELECT count(*) FROM outbox_parked`); n != 100 {
		t.Errorf("%d events parked, want all 100 still", n)
	}
	// A second pass has nothing left to do.
	if st, err := j.RunOnce(context.Background()); err != nil || st.Batches != 0 {
		t.Errorf("second pass: %+v, %v", st, err)
	}
}

// seedInbox records n events of consumer in the inbox with outcome, received
// at received.
func seedInbox(t *testing.T, db *pgxpool.Pool, consumer, outcome string, n int, received time.Time) {
	t.Helper()
	_, err := db.Exec(context.Background(), `
		INSERT INTO inbox (consumer, event_id, event_type, aggregate_id, outcome, error, received_at)
		SELECT $1, gen_random_uuid(), 'PaymentSucceeded', 'pay_' || i, $2,
		       CASE WHEN $2 = 'rejected' THEN 'no accountId' END, $3
		FROM generate_series(1, $4) i`, consumer, outcome, received, n)
	if err != nil {
		t.Fatal(err)
	}
}

// TestInboxRowsPastRetentionAreDeletedInBatches: inbox rows received more
// than InboxRetention ago are deleted, in batches, whatever their consumer;
// recent rows stay, and so do rejected rows however old (a person must look
// at them). A zero retention deletes nothing.
func TestInboxRowsPastRetentionAreDeletedInBatches(t *testing.T) {
	t.Parallel()
	db := pgtest.NewPool(t)
	old := now.Add(-policy.InboxRetention - time.Minute)
	seedInbox(t, db, "ledger", "applied", 900, old)
	seedInbox(t, db, "ledger", "duplicate_entry", 100, old)
	seedInbox(t, db, "ledger", "ignored", 100, old)
	seedInbox(t, db, "audit", "applied", 100, old)
	seedInbox(t, db, "ledger", "rejected", 7, old)
	seedInbox(t, db, "ledger", "applied", 50, now.Add(-policy.InboxRetention+time.Minute))
	log := slog.New(slog.DiscardHandler)

	keepAll := policy
	keepAll.InboxRetention = 0
	if st, err := New(db, clock.NewFake(now), keepAll, log).RunOnce(context.Background()); err != nil || st.InboxRowsDeleted != 0 {
		t.Fatalf("with no inbox retention: %+v, %v", st, err)
	}
	st, err := New(db, clock.NewFake(now), policy, log).RunOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.InboxRowsDeleted != 1200 || st.Batches < 1200/policy.BatchSize+1 || st.LargestBatchRows > policy.BatchSize {
		t.Errorf("stats %+v: want 1200 inbox rows deleted in batches of at most %d", st, policy.BatchSize)
	}
	if n := count(t, db, `SELECT count(*) FROM inbox WHERE outcome = 'rejected'`); n != 7 {
		t.Errorf("%d rejected rows kept, want all 7", n)
	}
	if n := count(t, db, `SELECT count(*) FROM inbox WHERE outcome <> 'rejected'`); n != 50 {
		t.Errorf("%d recent rows kept, want 50", n)
	}
}

// fakeStopwatch is a Janitor.stopwatch that reports the durations took, in
// turn, as the batches' durations, and then after for every later batch.
func fakeStopwatch(after time.Duration, took ...time.Duration) func() func() time.Duration {
	return func() func() time.Duration {
		return func() time.Duration {
			if len(took) == 0 {
				return after
			}
			d := took[0]
			took = took[1:]
			return d
		}
	}
}

// A pass that catches up on a backlog rests after each full batch, in
// proportion to what that batch took (Policy.Share), so that it takes at
// most that share of its time from live traffic; the last, partial batch
// of a step ends it without a rest, and a pass with nothing to do never
// rests.
func TestCatchingUpRestsBetweenFullBatches(t *testing.T) {
	db := pgtest.NewPool(t)
	ts := func(d time.Duration) *time.Time { v := now.Add(d); return &v }
	seed(t, db, "erased_", 1200, now.Add(-48*time.Hour), ts(-47*time.Hour), nil) // 1,200 answers past the replay window
	p := policy
	p.BatchSize, p.Share = 500, 0.25
	j := New(db, clock.NewFake(now), p, slog.New(slog.NewTextHandler(io.Discard, nil)))
	var rests []time.Duration
	j.rest = func(_ context.Context, d time.Duration) error {
		rests = append(rests, d)
		return nil
	}
	// Batches of 500, 500, 200 rows, said to take 40, 30 and 10 ms; every
	// later batch (the other steps, which find nothing) an hour, which no
	// rest may follow.
	j.stopwatch = fakeStopwatch(time.Hour, 40*time.Millisecond, 30*time.Millisecond, 10*time.Millisecond)
	st, err := j.RunOnce(context.Background())
	if err != nil || st.BodiesErased != 1200 || st.Batches != 3 {
		t.Fatalf("pass: %+v, %v", st, err)
	}
	// (1-Share)/Share = 3 times each full batch's own time, and nothing
	// after the partial one.
	want := []time.Duration{120 * time.Millisecond, 90 * time.Millisecond}
	if !slices.Equal(rests, want) || st.Rested != want[0]+want[1] {
		t.Errorf("rests %v (stats %v), want %v (%v in all)", rests, st.Rested, want, want[0]+want[1])
	}
	rests = nil
	if st, err := j.RunOnce(context.Background()); err != nil || st.Batches != 0 || st.Rested != 0 || len(rests) != 0 {
		t.Errorf("a pass with nothing to do: %+v, %v, rests %v", st, err, rests)
	}
}

// A pass resting between batches stops when its context ends: the rest,
// here three hours after a batch said to take one, ends with it.
func TestARestingPassStopsWithItsContext(t *testing.T) {
	db := pgtest.NewPool(t)
	ts := func(d time.Duration) *time.Time { v := now.Add(d); return &v }
	seed(t, db, "erased_", 1200, now.Add(-48*time.Hour), ts(-47*time.Hour), nil)
	p := policy
	p.BatchSize, p.Share = 500, 0.25
	j := New(db, clock.NewFake(now), p, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The context ends soon after the first batch, not during it.
	j.stopwatch = func() func() time.Duration {
		return func() time.Duration {
			time.AfterFunc(50*time.Millisecond, cancel)
			return time.Hour
		}
	}
	began := time.Now()
	st, err := j.RunOnce(ctx)
	if !errors.Is(err, context.Canceled) || st.BodiesErased != 500 || st.Rested != 3*time.Hour {
		t.Errorf("pass: %+v, %v; want one batch, then the context's end", st, err)
	}
	if took := time.Since(began); took > time.Minute {
		t.Errorf("the pass took %v: its rest outlived its context", took)
	}
}
