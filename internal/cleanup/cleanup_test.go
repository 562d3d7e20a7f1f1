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

var policy = Policy{ReplayTTL: 24 * time.Hour, MetadataTTL: 720 * time.Hour, OutboxRetention: 168 * time.Hour,
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
	_, err := db.Exec(context.Background(), `
		INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload, created_at, next_attempt_at, published_at)
		SELECT gen_random_uuid(), 'payment', 'p' || i, 'PaymentCreated', '{}', $1::timestamptz, $1::timestamptz, CASE WHEN i <= 700 THEN $1::timestamptz END
		FROM generate_series(1, 1000) i`, now.Add(long))
	if err != nil {
		t.Fatal(err)
	}

	j := New(db, clock.NewFake(now), policy, slog.New(slog.NewTextHandler(io.Discard, nil)))
	st, err := j.RunOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.KeysDeleted != 3000 || st.EventsDeleted != 700 {
		t.Errorf("stats %+v: want 3000 keys and 700 events deleted", st)
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
	if n := count(t, db, `SELECT count(*) FROM outbox_events WHERE published_at IS NULL`); n != 300 {
		t.Errorf("unpublished events = %d, want 300 kept", n)
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

// TestInboxRowsPastRetentionAreDeletedInBatches (issue 9, item 9): inbox
// rows received more than InboxRetention ago are deleted, in batches,
// whatever their consumer; recent rows stay, and so do rejected rows however
// old (a person must look at them). A zero retention deletes nothing.
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
