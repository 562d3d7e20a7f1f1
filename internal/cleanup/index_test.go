package cleanup

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/inbox"
	"github.com/paymentsapi/paymentsapi/internal/outbox"
	"github.com/paymentsapi/paymentsapi/internal/outbox/stream"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
)

// TestDeletingOutboxEventsReadsNoBacklog: the step that deletes outbox
// events finds them by age, through the primary key (UUIDv7 ids, in
// creation order), up to the bound below which no catch-up needs them.
// Here a relay was stopped for eight days (its position is older than the
// retention), and 20,000 events wait for its catch-up: half within
// CatchupMargin before its position, past retention but kept, half recent.
// A pass, run every minute, reads next to nothing of them (the package
// stream's own test covers a relay that is up to date).
func TestDeletingOutboxEventsReadsNoBacklog(t *testing.T) {
	t.Parallel()
	db := pgtest.NewPool(t)
	ctx := context.Background()
	stopped := now.Add(-policy.OutboxRetention - 24*time.Hour)
	seedEvents(t, db, "held_", 10000, 1, stopped.Add(-stream.CatchupMargin/2))
	seedEvents(t, db, "recent_", 10000, 1, now.Add(-time.Hour))
	recordPosition(t, db, "paymentsapi_outbox_test", stopped)
	if _, err := db.Exec(ctx, `ANALYZE outbox_events`); err != nil {
		t.Fatal(err)
	}
	cutoff := now.Add(-policy.OutboxRetention)
	pgtest.ReadsAtMost(t, db, 10, "timestamptz, int", outbox.DeletePublished,
		cutoff.Format(time.RFC3339Nano), fmt.Sprint(policy.BatchSize))
	// And it really deletes none of them.
	tag, err := db.Exec(ctx, outbox.DeletePublished, cutoff, policy.BatchSize)
	if err != nil || tag.RowsAffected() != 0 {
		t.Fatalf("clean-up deleted %d events (%v), want none: a catch-up may need them", tag.RowsAffected(), err)
	}
}

// TestErasingBodiesReadsNoErasedKeys: the step that erases expired response
// bodies finds them through an index of the keys that still have one: with
// 20,000 retained keys whose bodies are already erased, it reads next to
// nothing.
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

// TestDeletingOldInboxRowsReadsNoRecentOnes: the step that deletes old inbox
// rows finds them by age through an index that leaves rejected rows out: with
// 20,000 recent rows and old rejected ones (kept for a person), it reads next
// to nothing.
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
