package database_test

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/paymentsapi/paymentsapi/internal/database"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
)

// Migrations 00027 and 00028 move every stored key of the payments' scope
// to its new name, batch by batch over the primary key (ids far apart
// included), and nothing of another scope; then 00028 drops the move's
// procedure and the index that made one scope of both names.
func TestTheScopeMoveMovesEveryPaymentKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPoolAt(t, 26)
	if _, err := pool.Exec(ctx, `
		INSERT INTO idempotency_keys (id, tenant_id, operation, idempotency_key, fingerprint, resource_type, resource_id, created_at) OVERRIDING SYSTEM VALUE
		SELECT i, 't', CASE WHEN i % 10 = 0 THEN 'create_refund' ELSE 'payments.create' END, 'k' || i, '\x01',
		       CASE WHEN i % 10 = 0 THEN 'refund' ELSE 'payment' END, 'r' || i, now()
		FROM (SELECT generate_series(1, 2500) AS i UNION ALL SELECT 1000001) ids`); err != nil {
		t.Fatal(err)
	}
	if err := database.Migrate(ctx, pool, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatal(err)
	}
	count := func(sql string) int {
		t.Helper()
		var n int
		if err := pool.QueryRow(ctx, sql).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count(`SELECT count(*) FROM idempotency_keys WHERE operation = 'payments.create'`); n != 0 {
		t.Errorf("%d keys left under the old name", n)
	}
	if n := count(`SELECT count(*) FROM idempotency_keys WHERE operation = 'create_payment'`); n != 2251 {
		t.Errorf("%d keys under the new name, want 2251", n)
	}
	if n := count(`SELECT count(*) FROM idempotency_keys WHERE operation = 'create_refund'`); n != 250 {
		t.Errorf("%d refund keys, want 250 untouched", n)
	}
	if n := count(`SELECT count(*) FROM pg_proc WHERE proname = 'idempotency_keys_move_scope'`); n != 0 {
		t.Errorf("the move's procedure: %d, want it dropped by 00028", n)
	}
	if n := count(`SELECT count(*) FROM pg_indexes WHERE indexname = 'idempotency_keys_create_payment_scope_key'`); n != 0 {
		t.Errorf("the rename's index: %d, want it dropped by 00028", n)
	}
}
