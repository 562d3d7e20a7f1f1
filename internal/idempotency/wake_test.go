package idempotency

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// QueueWake ends the manual review of an unfinished key left for a person
// with the reason it names, booking its look; it leaves a key that is not
// in review, in review for another reason, or finished, as it is.
func TestQueueWakeEndsTheReviewOfAnUnfinishedKeyOnly(t *testing.T) {
	t.Parallel()
	e, pool, clk := testEngine(t)
	ctx := context.Background()
	now := clk.Now()
	scope := Scope{Tenant: "t", Operation: "widgets.create", Key: "k"}
	id := claimWidget(t, pool, now)
	read := func() (review, next *time.Time) {
		t.Helper()
		if err := pool.QueryRow(ctx, `SELECT manual_review_at, recovery_next_at FROM idempotency_keys WHERE id = $1`, id).Scan(&review, &next); err != nil {
			t.Fatal(err)
		}
		return review, next
	}
	wake := func(at time.Time) {
		t.Helper()
		b := &pgx.Batch{}
		e.QueueWake(b, scope, "waits on another key", at)
		if err := pool.SendBatch(ctx, b).Close(); err != nil {
			t.Fatal(err)
		}
	}
	_, before := read()
	wake(now.Add(time.Hour)) // not in review: unchanged
	if _, next := read(); !equalTimes(next, before) {
		t.Fatalf("a key not in review: its look moved from %v to %v", before, next)
	}
	if err := markForReview(ctx, pool, id, 1, now, "ambiguous"); err != nil {
		t.Fatal(err)
	}
	wake(now.Add(time.Hour)) // in review for another reason: unchanged
	if review, _ := read(); review == nil {
		t.Fatal("a key in review for another reason was taken out of it")
	}
	if err := markForReview(ctx, pool, id, 1, now, "waits on another key"); err != nil {
		t.Fatal(err)
	}
	at := now.Add(2 * time.Minute)
	wake(at)
	if review, next := read(); review != nil || next == nil || !next.Equal(at) {
		t.Fatalf("woken: review %v, next look %v; want no review, a look at %v", review, next, at)
	}
	if err := markForReview(ctx, pool, id, 1, now, "waits on another key"); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE idempotency_keys SET response_status = 201, response_body = '{}', completed_at = $2 WHERE id = $1`, id, now); err != nil {
		t.Fatal(err)
	}
	wake(at.Add(time.Hour))
	if review, _ := read(); review == nil {
		t.Fatal("a finished key was taken out of review")
	}
}

func equalTimes(a, b *time.Time) bool {
	return (a == nil && b == nil) || (a != nil && b != nil && a.Equal(*b))
}
