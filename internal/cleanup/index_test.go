package cleanup

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/inbox"
	"github.com/paymentsapi/paymentsapi/internal/outbox"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
)

// TestDeletingPublishedEventsReadsNoBacklog: the step that deletes
// published outbox events finds them by publication time through an index:
// on an outbox of recent published rows and pending ones, with nothing
// past retention, it reads next to nothing (the last statement of every
// pass is such a one, and passes run every minute).
func TestDeletingPublishedEventsReadsNoBacklog(t *testing.T) {
	t.Parallel()
	db := pgtest.NewPool(t)
	ctx := context.Background()
	_, err := db.Exec(ctx, `
		INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload, created_at, next_attempt_at, published_at)
		SELECT gen_random_uuid(), 'payment', 'p' || i, 'PaymentCreated', '{}', $1::timestamptz, $1::timestamptz,
		       CASE WHEN i % 10 <> 0 THEN $1::timestamptz END
		FROM generate_series(1, 20000) i`, now.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `ANALYZE outbox_events`); err != nil {
		t.Fatal(err)
	}
	pgtest.ReadsAtMost(t, db, 10, "timestamptz, int", outbox.DeletePublished,
		now.Add(-policy.OutboxRetention).Format(time.RFC3339Nano), fmt.Sprint(policy.BatchSize))
}

// TestErasingBodiesReadsNoErasedKeys (issue 9, item 7): the step that erases
// expired response bodies finds them through an index of the keys that still
// have one: with 20,000 retained keys whose bodies are already erased, it
// reads next to nothing.
func TestErasingBodiesReadsNoErasedKeys(t *testing.T) {
	t.Parallel()
	db := pgtest.NewPool(t)
	ctx := context.Background()
	_, err := db.Exec(ctx, `
		INSERT INTO idempotency_keys (tenant_id, operation, idempotency_key, fingerprint, resource_type, resource_id,
		    response_status, created_at, completed_at)
		SELECT 't', 'create_payment', 'k' || i, '\x01', 'payment', 'p' || i, 201, $1::timestamptz, $1::timestamptz
		FROM generate_series(1, 20000) i`, now.Add(-10*24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `ANALYZE idempotency_keys`); err != nil {
		t.Fatal(err)
	}
	pgtest.ReadsAtMost(t, db, 10, "timestamptz, int", idempotency.EraseExpiredAnswers,
		now.Add(-policy.ReplayTTL).Format(time.RFC3339Nano), fmt.Sprint(policy.BatchSize))
}

// TestDeletingOldInboxRowsReadsNoRecentOnes (issue 9, item 9): the step
// that deletes old inbox rows finds them by age through an index that
// leaves rejected rows out: with 20,000 recent rows and old rejected ones
// (kept for a person), it reads next to nothing.
func TestDeletingOldInboxRowsReadsNoRecentOnes(t *testing.T) {
	t.Parallel()
	db := pgtest.NewPool(t)
	seedInbox(t, db, "ledger", "applied", 20000, now.Add(-time.Hour))
	seedInbox(t, db, "ledger", "rejected", 2000, now.Add(-2*policy.InboxRetention))
	if _, err := db.Exec(context.Background(), `ANALYZE inbox`); err != nil {
		t.Fatal(err)
	}
	pgtest.ReadsAtMost(t, db, 10, "timestamptz, int", inbox.DeleteReceived,
		now.Add(-policy.InboxRetention).Format(time.RFC3339Nano), fmt.Sprint(policy.BatchSize))
}
