package payments_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paymentsapi/paymentsapi/internal/database"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
	"github.com/paymentsapi/paymentsapi/internal/servicetest"
)

// The payments' key scope was renamed ('payments.create' to
// 'create_payment', docs/operations.md, "Migrations") in three releases.
// This one, the third, reads keys under the new name only. A key the
// first release stored under the old name while the second rolled out
// (after the second's migration, 00027, had moved the rest) is moved by
// this release's migration, 00028, before this release serves: its retry
// replays the stored answer byte for byte, a different command under it
// is 422, and nothing is charged again. Without the move, the retry would
// find no key under the new name and create a second payment.
func TestAPaymentKeyTheFirstReleaseStoredUnderTheOldNameReplays(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// The schema the second release ran on, while the first still served.
	e := servicetest.New(t, servicetest.WithPool(func(t testing.TB) *pgxpool.Pool { return pgtest.NewPoolAtWithKeys(t, 27) }))
	// This release's code stands in for the first's, which created a
	// payment in RECEIVED and moved it on: this one creates it sent, which
	// 00029 allows, and names the payment's created_at in its audit, a
	// column 00036 adds. For this one payment, the row and the column,
	// taken back before the migrations run.
	const createdSent = `('payment', '', 'PROVIDER_REQUEST_SENT')`
	for _, sql := range []string{`INSERT INTO state_machine_moves (machine, from_state, to_state) VALUES ` + createdSent,
		`ALTER TABLE payment_transitions ADD COLUMN payment_created_at timestamptz`,
		`ALTER TABLE payments ADD COLUMN return_url text, ADD COLUMN next_action_url text`} {
		if _, err := e.Pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	first := e.Post("renamed", servicetest.Body())
	if first.Status != http.StatusCreated {
		t.Fatalf("first: %d %s", first.Status, first.Body)
	}
	for _, sql := range []string{`DELETE FROM state_machine_moves WHERE (machine, from_state, to_state) = ` + createdSent,
		`ALTER TABLE payment_transitions DROP COLUMN payment_created_at`,
		`ALTER TABLE payments DROP COLUMN return_url, DROP COLUMN next_action_url`} {
		if _, err := e.Pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	pgtest.RetireKeys(t, e.Pool)
	// As the first release wrote it.
	if _, err := e.Pool.Exec(ctx, `UPDATE idempotency_keys SET operation = 'payments.create'`); err != nil {
		t.Fatal(err)
	}
	if err := database.Migrate(ctx, e.Pool, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatal(err)
	}
	var operation string
	if err := e.Pool.QueryRow(ctx, `SELECT operation FROM idempotency_keys`).Scan(&operation); err != nil || operation != "create_payment" {
		t.Fatalf("after 00028 the key is stored under %q (%v), want create_payment", operation, err)
	}
	retry := e.Post("renamed", servicetest.Body())
	if retry.Status != first.Status || !bytes.Equal(retry.Body, first.Body) || retry.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry: %d %s (replayed %q); want the first answer replayed", retry.Status, retry.Body, retry.Header.Get("Idempotent-Replayed"))
	}
	if r := e.Post("renamed", servicetest.Body("amount", `"99.00"`)); r.Status != http.StatusUnprocessableEntity {
		t.Fatalf("another command under the key: %d %s, want 422", r.Status, r.Body)
	}
	if n := e.Count("payments"); n != 1 {
		t.Fatalf("%d payments, want 1", n)
	}
	if n := e.Count("idempotency_keys"); n != 1 {
		t.Fatalf("%d keys, want 1", n)
	}
}
