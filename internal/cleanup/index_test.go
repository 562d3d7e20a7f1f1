package cleanup

import (
	"context"
	"fmt"
	"testing"
	"time"

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
	// Both plans pgx may end up with for a prepared statement: custom, and
	// the generic one PostgreSQL caches after a few executions.
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		t.Run(mode, func(t *testing.T) {
			plan := pgtest.Explain(t, db, mode, "timestamptz, int", deleteEvents,
				now.Add(-policy.OutboxRetention).Format(time.RFC3339Nano), fmt.Sprint(policy.BatchSize))
			if got := plan.RowsRead(); got > 10 {
				t.Errorf("deleting published events read %v rows with none past retention:\n%s", got, plan)
			}
		})
	}
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
		SELECT 't', 'payments.create', 'k' || i, '\x01', 'payment', 'p' || i, 201, $1::timestamptz, $1::timestamptz
		FROM generate_series(1, 20000) i`, now.Add(-10*24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `ANALYZE idempotency_keys`); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		t.Run(mode, func(t *testing.T) {
			plan := pgtest.Explain(t, db, mode, "timestamptz, int", eraseBodies,
				now.Add(-policy.ReplayTTL).Format(time.RFC3339Nano), fmt.Sprint(policy.BatchSize))
			if got := plan.RowsRead(); got > 10 {
				t.Errorf("erasing bodies read %v rows with none to erase:\n%s", got, plan)
			}
		})
	}
}
