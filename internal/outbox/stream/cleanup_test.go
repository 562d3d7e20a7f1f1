package stream_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/paymentsapi/paymentsapi/internal/outbox"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
)

// TestCleanUpKeepsWhatACatchUpCouldNeed: clean-up deletes events older than
// the retention's cutoff, but none while no position is recorded, none
// created since CatchupMargin before the position, and no parked one.
func TestCleanUpKeepsWhatACatchUpCouldNeed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	at := func(pay string, ago time.Duration) string {
		ev := e.event(pay, "PaymentCreated")
		ev.OccurredAt = t0.Add(-ago)
		e.commit(t, ev)
		return ev.ID
	}
	old, parked, beforeCutoff, sinceCutoff := at("pay_old", 3*time.Hour), at("pay_parked", 2*time.Hour), at("pay_40m", 40*time.Minute), at("pay_20m", 20*time.Minute)
	if _, err := e.pool.Exec(ctx, `
		INSERT INTO outbox_parked (event_id, aggregate_type, aggregate_id, seq, attempts, last_error, parked_at)
		SELECT id, aggregate_type, aggregate_id, seq, 10, 'too large', now() FROM outbox_events WHERE id = $1`, parked); err != nil {
		t.Fatal(err)
	}
	left := func() []string {
		t.Helper()
		if _, err := e.pool.Exec(ctx, outbox.DeletePublished, t0.Add(-30*time.Minute), 100); err != nil {
			t.Fatal(err)
		}
		rows, err := e.pool.Query(ctx, `SELECT id::text FROM outbox_events ORDER BY seq`)
		if err != nil {
			t.Fatal(err)
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	all := []string{old, parked, beforeCutoff, sinceCutoff}
	if got := left(); !slices.Equal(got, all) {
		t.Fatalf("with no position, clean-up left %v, want all of %v", got, all)
	}
	// A position 38 minutes back: a catch-up could need what was created
	// since 43 minutes back.
	if _, err := e.pool.Exec(ctx, `INSERT INTO outbox_stream_positions (slot, committed_at, updated_at) VALUES ($1, $2, $2)`,
		e.slot, t0.Add(-38*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if got, want := left(), []string{parked, beforeCutoff, sinceCutoff}; !slices.Equal(got, want) {
		t.Fatalf("with a position 38 min back, clean-up left %v, want %v", got, want)
	}
	if _, err := e.pool.Exec(ctx, `UPDATE outbox_stream_positions SET committed_at = $1`, t0); err != nil {
		t.Fatal(err)
	}
	if got, want := left(), []string{parked, sinceCutoff}; !slices.Equal(got, want) {
		t.Fatalf("with the position now, clean-up left %v, want %v", got, want)
	}
}

// TestCleanUpReadsOnlyWhatIsOldEnough: with 20,000 events too young to go,
// a clean-up run reads next to nothing, as a custom and as a generic plan.
func TestCleanUpReadsOnlyWhatIsOldEnough(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	// UUIDv7 ids of t0's millisecond, as ids.NewEventID makes them.
	_, err := e.pool.Exec(ctx, `
		INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload, created_at, next_attempt_at)
		SELECT (lpad(to_hex(floor(extract(epoch FROM $1::timestamptz) * 1000)::bigint), 12, '0')
		        || '7' || substr(md5(i::text), 1, 3) || '8' || substr(md5(i::text), 4, 15))::uuid,
		       'payment', 'p' || i, 'PaymentCreated', '{}', $1, $1
		FROM generate_series(1, 20000) i`, t0)
	if err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{
		`INSERT INTO outbox_stream_positions (slot, committed_at, updated_at) VALUES ('s', now(), now())`,
		`ANALYZE outbox_events`,
	} {
		if _, err := e.pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	pgtest.ReadsAtMost(t, e.pool, 10, "timestamptz, int", outbox.DeletePublished, t0.Add(-time.Minute).Format(time.RFC3339Nano), "500")
}
