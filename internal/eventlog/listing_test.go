package eventlog

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/operation"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
)

// TestAListingPageReadsOnlyItsPage: a page of GET /events, first or later,
// filtered by types, a time range or a payment or not, reads about its
// page from each branch of the log (the outbox, by a backward scan of its
// tenant index, and the copy an earlier release kept), whatever the two
// tables hold, and sorts nothing. A payment's events are read back only to
// the payment's creation.
func TestAListingPageReadsOnlyItsPage(t *testing.T) {
	t.Parallel()
	db := pgtest.NewPool(t)
	ctx := context.Background()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	// 20,000 events of two tenants in the outbox, a second apart, two
	// named types and one without a name; 10,000 older ones in the copy,
	// of the two types, and its copies of the outbox's first 1,000.
	// (A type filter reads past the tenant's events of other types: a
	// rare type costs a scan of the tenant's events, as it always has.)
	for _, sql := range []string{`
		INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload, created_at, next_attempt_at)
		SELECT gen_random_uuid(), 'payment', 'pay_' || i, (ARRAY['Created', 'Succeeded', 'Unnamed'])[i % 3 + 1],
		       jsonb_build_object('paymentId', 'pay_' || i, 'tenantId', 'tenant_' || (i % 2)),
		       $1::timestamptz + i * interval '1 second', $1::timestamptz
		FROM generate_series(1, 20000) i`, `
		INSERT INTO events (id, tenant_id, type, aggregate_id, occurred_at, data, recorded_at)
		SELECT gen_random_uuid(), 'tenant_' || (i % 2), (ARRAY['thing.created', 'thing.succeeded'])[i / 2 % 2 + 1], 'old_' || i,
		       $1::timestamptz - i * interval '1 second', '{}', $1
		FROM generate_series(1, 10000) i`, `
		INSERT INTO events (id, tenant_id, type, aggregate_id, occurred_at, data, recorded_at)
		SELECT id, payload->>'tenantId', 'thing.created', aggregate_id, created_at, '{}', $1
		FROM outbox_events ORDER BY created_at LIMIT 1000`,
	} {
		if _, err := db.Exec(ctx, sql, t0); err != nil {
			t.Fatal(err)
		}
	}
	// As migration 00035 sets it: the newest event the copy alone holds.
	for _, sql := range []string{`UPDATE events_copy_frontier SET at = (SELECT max(occurred_at) FROM events c
		WHERE NOT EXISTS (SELECT FROM outbox_events o WHERE o.id = c.id))`, `ANALYZE outbox_events`, `ANALYZE events`} {
		if _, err := db.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	mods := []operation.Module{{Name: "things", Resource: operation.Resource{Type: "thing", IDField: "paymentId"}, Events: []operation.Event{
		{Type: "Created", Name: "thing.created"}, {Type: "Succeeded", Name: "thing.succeeded", Hidden: []string{"secret"}}, {Type: "Unnamed"},
	}}}
	l := New(nil, clock.System{}, slog.New(slog.DiscardHandler), mods, WithSubject(Subject{Member: "paymentId"}))
	cursor := encodeCursor(t0.Add(3*time.Hour), "01900000-0000-7000-8000-000000000000")
	// A payment's events, read back to its creation (List sets since).
	thing := Query{Limit: 20, About: []SubjectID{{Member: "paymentId", ID: "pay_19991"}}, since: t0.Add(19991*time.Second - maxClockSkew)}
	for _, q := range []Query{
		{Limit: 20},
		{Limit: 20, Cursor: cursor},
		{Limit: 20, Types: []string{"thing.succeeded"}},
		{Limit: 20, Types: []string{"thing.created"}, Cursor: cursor},
		{Limit: 20, Types: []string{"thing.created", "thing.succeeded"}, CreatedFrom: t0.Add(time.Hour), CreatedTo: t0.Add(2 * time.Hour)},
		{Limit: 100, After: t0.Add(-time.Hour)},
		{Limit: 20, Types: []string{"thing.succeeded"}, Cursor: encodeCursor(t0.Add(time.Minute), "01900000-0000-7000-8000-000000000000")},
		thing,
	} {
		t.Run(fmt.Sprintf("types=%q,about=%v,cursor=%v,limit=%d", q.Types, q.About, q.Cursor != "", q.Limit), func(t *testing.T) {
			sql, args, err := l.listQuery("tenant_1", q)
			if err != nil {
				t.Fatal(err)
			}
			params, texts := pgtest.Params(args)
			// Each branch reads its page and one more, a filtered type up
			// to three times as many (one event in three has it), the
			// copy's rows each look for their outbox twin.
			pgtest.ReadsAtMost(t, db, float64(10*(q.Limit+1)), params, sql, texts...)
			for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
				if plan := pgtest.Explain(t, db, mode, params, sql, texts...).String(); strings.Contains(plan, "Seq Scan outbox_events") || strings.Contains(plan, "Seq Scan events ") ||
					!strings.Contains(plan, "outbox_events_tenant_idx") {
					t.Errorf("%s: the page is not a merge of index scans:\n%s", mode, plan)
				}
			}
		})
	}
}
