package payments

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

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
			types := []string{"text"}
			texts := []string{args[0].(string)}
			if lq.AccountID != "" {
				types, texts = append(types, "text"), append(texts, lq.AccountID)
			}
			if lq.Cursor != "" {
				at, id, _ := decodeCursor(lq.Cursor)
				types, texts = append(types, "timestamptz", "text"), append(texts, at.Format(time.RFC3339Nano), id)
			}
			types, texts = append(types, "int"), append(texts, fmt.Sprint(lq.Limit+1))
			pgtest.ReadsAtMost(t, db, float64(lq.Limit+1), strings.Join(types, ", "), sql, texts...)
			for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
				if plan := pgtest.Explain(t, db, mode, strings.Join(types, ", "), sql, texts...).String(); strings.Contains(plan, "Sort") ||
					!strings.Contains(plan, "_listing_idx") {
					t.Errorf("%s: the page is not one scan of a listing index:\n%s", mode, plan)
				}
			}
		})
	}
}
