package payments_test

import (
	"github.com/paymentsapi/paymentsapi/internal/servicetest"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// A new payment is created already sent (migration 00029): its
// claim's transaction inserts it in PROVIDER_REQUEST_SENT instead of
// inserting it RECEIVED and updating it, one row version and one
// statement fewer per payment, and its audit still records the creation in
// RECEIVED, then the move to sent. A trigger that refuses any update of a
// payment out of RECEIVED shows that none happens on the way.
func TestANewPaymentIsCreatedSent(t *testing.T) {
	t.Parallel()
	e := servicetest.New(t)
	for _, stmt := range []string{
		`CREATE FUNCTION refuse_update_from_received() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'payment % updated out of RECEIVED', OLD.id; END $$`,
		`CREATE TRIGGER payments_no_update_from_received BEFORE UPDATE ON payments
		FOR EACH ROW WHEN (OLD.state = 'RECEIVED') EXECUTE FUNCTION refuse_update_from_received()`,
	} {
		if _, err := e.Pool.Exec(t.Context(), stmt); err != nil {
			t.Fatal(err)
		}
	}
	if r := e.Post("created-sent", servicetest.Body()); r.Status != http.StatusCreated {
		t.Fatalf("POST /payments: %d %s", r.Status, r.Body)
	}
	rows, err := e.Pool.Query(t.Context(), `SELECT coalesce(from_state, '') || '>' || to_state || ':' || reason FROM payment_transitions ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	want := []string{">RECEIVED:request accepted", "RECEIVED>PROVIDER_REQUEST_SENT:sending to provider"}
	if len(got) != 3 || !slices.Equal(got[:2], want) || !strings.HasPrefix(got[2], "PROVIDER_REQUEST_SENT>COMPLETED") {
		t.Fatalf("the payment's audit: %q, want %q then its completion", got, want)
	}
}
