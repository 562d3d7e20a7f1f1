package idempotency

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/paymentsapi/paymentsapi/internal/pgtest"
)

// QueueWake ends the manual review of every unfinished key of the tenant's
// operation left for a person with the reason it names, booking their
// looks; it leaves a key that is not in review, in review for another
// reason, finished, or of another tenant or operation, as it is.
func TestQueueWakeEndsTheReviewOfTheUnfinishedKeysThatWaitedOnly(t *testing.T) {
	t.Parallel()
	e, pool, clk := testEngine(t)
	ctx := context.Background()
	now := clk.Now()
	const because = "waits on another key"
	claim := func(scope Scope, resID string) int64 {
		t.Helper()
		var id int64
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) (err error) {
			id, _, err = claimKey(ctx, tx, scope, []byte{1}, Resource{Type: "widget", ID: resID}, now, time.Minute, nil)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	first := claim(Scope{Tenant: "t", Operation: "widgets.create", Key: "k1"}, "w_1")
	second := claim(Scope{Tenant: "t", Operation: "widgets.create", Key: "k2"}, "w_2")
	otherTenant := claim(Scope{Tenant: "u", Operation: "widgets.create", Key: "k1"}, "w_3")
	otherOperation := claim(Scope{Tenant: "t", Operation: "widgets.delete", Key: "k1"}, "w_4")
	read := func(id int64) (review, next *time.Time) {
		t.Helper()
		if err := pool.QueryRow(ctx, `SELECT manual_review_at, recovery_next_at FROM idempotency_keys WHERE id = $1`, id).Scan(&review, &next); err != nil {
			t.Fatal(err)
		}
		return review, next
	}
	mark := func(id int64, reason string) {
		t.Helper()
		if err := markForReview(ctx, pool, id, 1, now, reason); err != nil {
			t.Fatal(err)
		}
	}
	wake := func(at time.Time) {
		t.Helper()
		b := &pgx.Batch{}
		e.QueueWake(b, "t", "widgets.create", because, at)
		if err := pool.SendBatch(ctx, b).Close(); err != nil {
			t.Fatal(err)
		}
	}
	_, before := read(first)
	wake(now.Add(time.Hour)) // not in review: unchanged
	if _, next := read(first); !equalTimes(next, before) {
		t.Fatalf("a key not in review: its look moved from %v to %v", before, next)
	}
	mark(first, "ambiguous")
	wake(now.Add(time.Hour)) // in review for another reason: unchanged
	if review, _ := read(first); review == nil {
		t.Fatal("a key in review for another reason was taken out of it")
	}

	for _, id := range []int64{first, second, otherTenant, otherOperation} {
		mark(id, because)
	}
	at := now.Add(2 * time.Minute)
	wake(at)
	for _, id := range []int64{first, second} {
		if review, next := read(id); review != nil || next == nil || !next.Equal(at) {
			t.Fatalf("woken key %d: review %v, next look %v; want no review, a look at %v", id, review, next, at)
		}
	}
	for _, id := range []int64{otherTenant, otherOperation} {
		if review, _ := read(id); review == nil {
			t.Fatalf("key %d, of another tenant or operation, was taken out of review", id)
		}
	}

	mark(first, because)
	if _, err := pool.Exec(ctx, `UPDATE idempotency_keys SET response_status = 201, response_body = '{}', completed_at = $2 WHERE id = $1`, first, now); err != nil {
		t.Fatal(err)
	}
	wake(at.Add(time.Hour))
	if review, _ := read(first); review == nil {
		t.Fatal("a finished key was taken out of review")
	}
}

func equalTimes(a, b *time.Time) bool {
	return (a == nil && b == nil) || (a != nil && b != nil && a.Equal(*b))
}

// QueueWake runs with every end of a resource others may wait on (each
// capture or cancel settled), so it must read only keys in review or
// unfinished (a partial index holds each), never the tenant's keys of the
// operation: here 20,000 finished keys and a few in review, under a custom
// and a generic plan.
func TestQueueWakeReadsOnlyTheKeysInReview(t *testing.T) {
	t.Parallel()
	_, pool, clk := testEngine(t)
	ctx := context.Background()
	now := clk.Now()
	_, err := pool.Exec(ctx, `
		INSERT INTO idempotency_keys (tenant_id, operation, idempotency_key, fingerprint, resource_type, resource_id,
		                              created_at, response_status, response_body, completed_at, manual_review_at, recovery_last_error)
		SELECT 't', 'widgets.cancel', 'k' || i, '\x01', 'widget', 'w_' || i, $1,
		       CASE WHEN i > 20 THEN 200 END, CASE WHEN i > 20 THEN '{}'::bytea END, CASE WHEN i > 20 THEN $1::timestamptz END,
		       CASE WHEN i <= 20 THEN $1::timestamptz END, CASE WHEN i <= 10 THEN 'waits' ELSE 'ambiguous' END
		FROM generate_series(1, 20020) i`, now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE idempotency_keys`); err != nil {
		t.Fatal(err)
	}
	pgtest.ReadsAtMost(t, pool, 100, "text, text, text, timestamptz", wakeSQL,
		"t", "widgets.cancel", "waits", now.Format(time.RFC3339Nano))
}
