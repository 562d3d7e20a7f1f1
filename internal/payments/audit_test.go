package payments

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/database"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
)

// TestAPaymentsAuditIsReadThroughItsCreation: a payment's audit trail
// (AuditSQL) reads its own records and next to nothing else, among 60,000
// records of 20,000 payments, through an index on its payment's created_at
// whose new entries go to its right edge; and new records take no entry in
// an index that carries the payment's id (40 bytes more per entry, three
// entries per payment). Records written before their payment's created_at
// was recorded (migration 00036) got it from migration 00050.
func TestAPaymentsAuditIsReadThroughItsCreation(t *testing.T) {
	t.Parallel()
	db := pgtest.NewPool(t)
	ctx := context.Background()
	backfill := pgtest.MigrationVersion(t, "payments_backfill_pre_release_rows")
	pgtest.MigrateDownTo(t, db, backfill-1)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, sql := range []string{`
		INSERT INTO payments (id, tenant_id, account_id, amount_minor, currency, merchant_reference,
		                      payment_method, channel, description, state, created_at, updated_at)
		SELECT 'pay_' || md5('p' || i), 't', 'acc_1', 1000, 'EUR', 'inv-' || i, 'pm_card_visa', 'web', '', 'RECEIVED',
		       $1::timestamptz + i * interval '1 second', $1::timestamptz + i * interval '1 second'
		FROM generate_series(1, 20000) i`, `
		INSERT INTO payment_transitions (payment_id, from_state, to_state, reason, occurred_at, payment_created_at)
		SELECT p.id, s.f, s.t, 'r', p.created_at, CASE WHEN p.merchant_reference < 'inv-5' THEN p.created_at END
		FROM payments p, (VALUES (NULL, 'RECEIVED'), ('RECEIVED', 'PROVIDER_REQUEST_SENT'),
		                          ('PROVIDER_REQUEST_SENT', 'COMPLETED')) AS s (f, t)`,
	} {
		var args []any
		if strings.Contains(sql, "$1") {
			args = []any{t0}
		}
		if _, err := db.Exec(ctx, sql, args...); err != nil {
			t.Fatal(err)
		}
	}
	if err := database.Migrate(ctx, db, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{`ANALYZE payments`, `ANALYZE payment_transitions`} {
		if _, err := db.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	for _, ref := range []string{"inv-42", "inv-9000"} { // one named by its created_at, one written before 00036
		t.Run(ref, func(t *testing.T) {
			var id string
			if err := db.QueryRow(ctx, `SELECT id FROM payments WHERE merchant_reference = $1`, ref).Scan(&id); err != nil {
				t.Fatal(err)
			}
			var n int
			if err := db.QueryRow(ctx, `SELECT count(*) FROM (`+AuditSQL+`) a`, id).Scan(&n); err != nil || n != 3 {
				t.Fatalf("the audit of %s: %d records (%v), want 3", ref, n, err)
			}
			pgtest.ReadsAtMost(t, db, 12, "text", AuditSQL, id)
			for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
				if plan := pgtest.Explain(t, db, mode, "text", AuditSQL, id).String(); strings.Contains(plan, "Seq Scan payment_transitions") {
					t.Errorf("%s: the audit scans the table:\n%s", mode, plan)
				}
			}
		})
	}
	if _, err := db.Exec(ctx, `INSERT INTO payment_transitions (payment_id, from_state, to_state, reason, occurred_at)
		VALUES ('pay_x', NULL, 'RECEIVED', 'r', now())`); err == nil {
		t.Error("a record without its payment's created_at was written")
	}
	var defs string
	if err := db.QueryRow(ctx, `SELECT string_agg(indexdef, E'\n') FROM pg_indexes WHERE tablename = 'payment_transitions'`).Scan(&defs); err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(defs, "\n") {
		if strings.Contains(line, "payment_id") && !strings.Contains(line, "payment_created_at IS NULL") {
			t.Errorf("a new record takes an entry in an index that carries its payment's id: %s", line)
		}
	}
}
