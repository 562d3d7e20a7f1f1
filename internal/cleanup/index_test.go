package cleanup

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

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
			tx, err := db.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(ctx) }()
			if _, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = "+mode); err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, "PREPARE step_"+mode+"(timestamptz, int) AS "+deleteEvents); err != nil {
				t.Fatal(err)
			}
			var raw []byte
			err = tx.QueryRow(ctx, fmt.Sprintf("EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE step_"+mode+"('%s', %d)",
				now.Add(-policy.OutboxRetention).Format(time.RFC3339Nano), policy.BatchSize), pgx.QueryExecModeSimpleProtocol).Scan(&raw)
			if err != nil {
				t.Fatal(err)
			}
			var plans []struct {
				Plan planNode `json:"Plan"`
			}
			if err := json.Unmarshal(raw, &plans); err != nil {
				t.Fatal(err)
			}
			if got := plans[0].Plan.rowsRead(); got > 10 {
				t.Errorf("deleting published events read %v rows with none past retention:\n%s", got, plans[0].Plan)
			}
		})
	}
}

// planNode is a node of EXPLAIN (ANALYZE, FORMAT JSON).
type planNode struct {
	NodeType       string     `json:"Node Type"`
	Relation       string     `json:"Relation Name"`
	Index          string     `json:"Index Name"`
	ActualRows     float64    `json:"Actual Rows"`
	ActualLoops    float64    `json:"Actual Loops"`
	RemovedFilter  float64    `json:"Rows Removed by Filter"`
	RemovedRecheck float64    `json:"Rows Removed by Index Recheck"`
	Plans          []planNode `json:"Plans"`
}

// rowsRead sums the rows that the scans of a plan read: returned, or read
// and then removed by a filter.
func (n planNode) rowsRead() float64 {
	total := 0.0
	if n.Relation != "" || n.Index != "" {
		total += n.ActualLoops * (n.ActualRows + n.RemovedFilter + n.RemovedRecheck)
	}
	for _, c := range n.Plans {
		total += c.rowsRead()
	}
	return total
}

func (n planNode) String() string {
	var b strings.Builder
	var walk func(n planNode, depth int)
	walk = func(n planNode, depth int) {
		fmt.Fprintf(&b, "%s%s %s %s rows=%v loops=%v filtered=%v\n", strings.Repeat("  ", depth), n.NodeType, n.Relation, n.Index,
			n.ActualRows, n.ActualLoops, n.RemovedFilter+n.RemovedRecheck)
		for _, c := range n.Plans {
			walk(c, depth+1)
		}
	}
	walk(n, 0)
	return b.String()
}
