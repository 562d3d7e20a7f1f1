package idempotency_test

import (
	"github.com/paymentsapi/paymentsapi/internal/servicetest"
	"maps"
	"net/http"
	"testing"
)

// TestRetriesWriteNothing: a retry of a taken key is answered from the key
// and writes nothing, for every operation. Its claim's batch carries the
// operation's Create statements (the payment or refund, its first
// transition, its event, the refund's lock and sum); they must neither
// write nor refuse when the key was taken (claim.Statement). Replays,
// and a key reused with another body (422), leave every table as the first
// request left it.
func TestRetriesWriteNothing(t *testing.T) {
	t.Parallel()
	e := servicetest.New(t)
	tables := []string{"payments", "payment_transitions", "refunds", "refund_transitions", "outbox_events", "idempotency_keys"}
	counts := func() map[string]int {
		c := map[string]int{}
		for _, table := range tables {
			c[table] = e.Count(table)
		}
		return c
	}

	pay := e.Pay("pm_card_visa", "inv-retry")
	if r := e.Refund(pay, "r-retry", `{"amount":"2.50"}`); r.Status != http.StatusCreated {
		t.Fatalf("refund: %d %s", r.Status, r.Body)
	}
	before := counts()
	for range 3 {
		if r := e.Post("pay-inv-retry", servicetest.Body("merchantReference", `"inv-retry"`, "paymentMethod", `"pm_card_visa"`)); r.Status != http.StatusCreated || r.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("payment replay: %d %v %s", r.Status, r.Header, r.Body)
		}
		if r := e.Refund(pay, "r-retry", `{"amount":"2.50"}`); r.Status != http.StatusCreated || r.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("refund replay: %d %v %s", r.Status, r.Header, r.Body)
		}
	}
	if r := e.Post("pay-inv-retry", servicetest.Body("merchantReference", `"inv-other"`)); r.Status != http.StatusUnprocessableEntity {
		t.Fatalf("payment key reused: %d %s", r.Status, r.Body)
	}
	if r := e.Refund(pay, "r-retry", `{"amount":"1.00"}`); r.Status != http.StatusUnprocessableEntity {
		t.Fatalf("refund key reused: %d %s", r.Status, r.Body)
	}
	if after := counts(); !maps.Equal(after, before) {
		t.Fatalf("rows after the retries %v, want them as after the first requests %v", after, before)
	}
}
