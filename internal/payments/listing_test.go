package payments

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paymentsapi/paymentsapi/internal/pgtest"
)

// TestAListingPageReadsOnlyItsPage: a page of GET /payments, with or without
// accountId, first or later, is one backward scan of an ascending listing
// index (migration 00026): it reads its page, however many payments the
// tenant and its other accounts have, and sorts nothing.
func TestAListingPageReadsOnlyItsPage(t *testing.T) {
	t.Parallel()
	db := pgtest.NewPool(t)
	ctx := context.Background()
	// 20,000 payments of two tenants, five accounts each, a second apart.
	_, err := db.Exec(ctx, `
		INSERT INTO payments (id, tenant_id, account_id, amount_minor, currency, merchant_reference,
		                      payment_method, channel, description, state, created_at, updated_at)
		SELECT 'pay_' || lpad(i::text, 26, '0'), 'tenant_' || (i % 2), 'acc_' || (i % 10), 1000, 'EUR',
		       'inv-' || i, 'pm_card_visa', 'web', '', 'RECEIVED',
		       $1::timestamptz + i * interval '1 second', $1::timestamptz + i * interval '1 second'
		FROM generate_series(1, 20000) i`, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `ANALYZE payments`); err != nil {
		t.Fatal(err)
	}
	// Ascending (new payments fill their right edge), read backwards.
	for _, idx := range []string{"payments_tenant_listing_idx", "payments_account_listing_idx"} {
		var def string
		if err := db.QueryRow(ctx, `SELECT indexdef FROM pg_indexes WHERE indexname = $1`, idx).Scan(&def); err != nil {
			t.Fatalf("%s: %v", idx, err)
		}
		if strings.Contains(def, "DESC") {
			t.Errorf("%s is declared descending: %s", idx, def)
		}
	}
	cursor := encodeCursor(time.Date(2026, 1, 1, 3, 0, 0, 0, time.UTC), "pay_"+strings.Repeat("0", 21)+"10800")
	for _, lq := range []ListQuery{
		{Limit: 20},
		{Limit: 20, AccountID: "acc_3"},
		{Limit: 20, Cursor: cursor},
		{Limit: 20, AccountID: "acc_3", Cursor: cursor},
	} {
		t.Run(fmt.Sprintf("account=%q,cursor=%v", lq.AccountID, lq.Cursor != ""), func(t *testing.T) {
			sql, args, err := listQuery("tenant_1", lq)
			if err != nil {
				t.Fatal(err)
			}
			types, texts := pgtest.Params(args)
			pgtest.ReadsAtMost(t, db, float64(lq.Limit+1), types, sql, texts...)
			for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
				if plan := pgtest.Explain(t, db, mode, types, sql, texts...).String(); strings.Contains(plan, "Sort") ||
					!strings.Contains(plan, "_listing_idx") {
					t.Errorf("%s: the page is not one scan of a listing index:\n%s", mode, plan)
				}
			}
		})
	}
}

// TestFiltersReadThroughAnIndex: on 20,000 payments of two tenants, in the
// proportions of a running service (most succeeded, one in twenty
// declined, a few canceled, failed or in flight), each filter of GET
// /payments, first page or later, reads through the index docs/INDEXES.md
// names for it, under a custom plan and under the generic plan a cached
// statement gets: never a sequential scan of payments. A reference is
// looked up, whatever the statuses asked for; a status that frees the
// reference (rare, final) reads the listing of those payments alone; the
// others read the tenant's or the account's listing, backwards, from the
// end of the range asked for.
func TestFiltersReadThroughAnIndex(t *testing.T) {
	t.Parallel()
	for _, schema := range []struct {
		name string
		pool func(testing.TB) *pgxpool.Pool
	}{{"migrated", pgtest.NewPool}, {"contracted", pgtest.NewContractedPool}} {
		t.Run(schema.name, func(t *testing.T) {
			t.Parallel()
			db := schema.pool(t)
			seedLargeTable(t, db)
			at := func(h int) time.Time { return time.Date(2026, 1, 1, h, 0, 0, 0, time.UTC) }
			cursor := encodeCursor(at(3), "pay_"+strings.Repeat("0", 21)+"10800")
			const (
				tenantListing  = "payments_tenant_listing_idx"
				accountListing = "payments_account_listing_idx"
				freedListing   = "payments_freed_listing_idx"
				freedReference = "payments_freed_reference_idx"
				holder         = "payments_reference_holder_key"
			)
			for _, tc := range []struct {
				lq      ListQuery
				indexes []string // the plan reads through each of these
				reads   float64  // and reads at most this many rows (pgtest.Plan.RowsRead)
			}{
				{ListQuery{}, []string{tenantListing}, 21},
				{ListQuery{AccountID: "acc_3", Cursor: cursor}, []string{accountListing}, 21},
				{ListQuery{Statuses: []Status{StatusSucceeded}}, []string{tenantListing}, 40},
				// A rare status that keeps the reference reads back until it
				// has a page: one payment in forty is in flight or failed.
				{ListQuery{Statuses: []Status{StatusProcessing, StatusFailed}, Cursor: cursor}, []string{tenantListing}, 2000},
				{ListQuery{Statuses: []Status{StatusDeclined}}, []string{freedListing}, 40},
				{ListQuery{Statuses: []Status{StatusCanceled, StatusDeclined}, Cursor: cursor}, []string{freedListing}, 21},
				{ListQuery{CreatedFrom: at(1), CreatedTo: at(2)}, []string{tenantListing}, 21},
				// (Half of acc_3's payments are declined in this seed.)
				{ListQuery{AccountID: "acc_3", CreatedFrom: at(1), Statuses: []Status{StatusSucceeded}}, []string{accountListing}, 50},
				// A reference: its few payments, found by the index and
				// read (each counted at the index and at the table).
				{ListQuery{MerchantReference: "inv-4242"}, []string{holder, freedReference}, 10},
				{ListQuery{MerchantReference: "inv-4242", AccountID: "acc_2"}, []string{"reference"}, 10},
				{ListQuery{MerchantReference: "inv-4242", Statuses: []Status{StatusDeclined}}, []string{freedReference}, 10},
				{ListQuery{MerchantReference: "inv-4242", Statuses: []Status{StatusSucceeded, StatusProcessing}}, []string{holder}, 10},
				{ListQuery{MerchantReference: "inv-4242", Statuses: []Status{StatusSucceeded, StatusCanceled}, CreatedTo: at(5)}, []string{holder, freedReference}, 10},
			} {
				tc.lq.Limit = 20
				t.Run(fmt.Sprintf("%+v", tc.lq), func(t *testing.T) {
					sql, args, err := listQuery("tenant_1", tc.lq)
					if err != nil {
						t.Fatal(err)
					}
					types, texts := pgtest.Params(args)
					for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
						explained := pgtest.Explain(t, db, mode, types, sql, texts...)
						plan := explained.String()
						if explained.RowsRead() > tc.reads {
							t.Errorf("%s: read %v rows, at most %v expected:\n%s", mode, explained.RowsRead(), tc.reads, plan)
						}
						if tc.lq.MerchantReference != "" && explained.Blocks() > 20 {
							t.Errorf("%s: a reference's payments found in %v pages:\n%s", mode, explained.Blocks(), plan)
						}
						if strings.Contains(plan, "Seq Scan payments") {
							t.Errorf("%s: a sequential scan of payments:\n%s", mode, plan)
						}
						for _, idx := range tc.indexes {
							if !strings.Contains(plan, idx) {
								t.Errorf("%s: not read through %s:\n%s", mode, idx, plan)
							}
						}
					}
				})
			}
		})
	}
}

// seedLargeTable writes 20,000 payments of two tenants and ten accounts, a
// second apart, moved (in bulk, by the state machine's moves) to the
// proportions of a running service, and analyzes the table.
func seedLargeTable(t *testing.T, db *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	for _, sql := range []string{`
		INSERT INTO payments (id, tenant_id, account_id, amount_minor, currency, merchant_reference,
		                      payment_method, channel, description, state, created_at, updated_at)
		SELECT 'pay_' || lpad(i::text, 26, '0'), 'tenant_' || (i % 2), 'acc_' || (i % 10), 1000, 'EUR',
		       'inv-' || i, 'pm_card_visa', 'web', '', CASE WHEN i % 250 = 7 THEN 'RECEIVED' ELSE 'PROVIDER_REQUEST_SENT' END,
		       '2026-01-01'::timestamptz + i * interval '1 second', '2026-01-01'::timestamptz + i * interval '1 second'
		FROM generate_series(1, 20000) i`,
		`UPDATE payments SET state = 'CANCELED' WHERE state = 'RECEIVED'`,
		`UPDATE payments SET state = CASE WHEN right(id, 2)::int % 20 = 3 THEN 'DECLINED'
		                                  WHEN right(id, 3)::int % 100 = 11 THEN 'FAILED_RETRYABLE'
		                                  ELSE 'COMPLETED' END
		 WHERE state = 'PROVIDER_REQUEST_SENT' AND right(id, 3)::int % 100 <> 51`,
		// inv-4242 held by one payment, freed by two others.
		`UPDATE payments SET merchant_reference = 'inv-4242' WHERE id IN ('pay_' || lpad('4243', 26, '0'), 'pay_' || lpad('4223', 26, '0'))`,
		`ANALYZE payments`,
	} {
		if _, err := db.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
}
