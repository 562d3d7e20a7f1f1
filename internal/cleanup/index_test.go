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
