package payments_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/cleanup"
	"github.com/paymentsapi/paymentsapi/internal/servicetest"
)

// After the replay window a same-key retry learns the payment id, never
// causes a new charge; after the metadata retention the key is forgotten,
// but the same command derives the payment's id again and is answered as
// expired, and the merchant reference still guards the payment against
// another command.
func TestExpiredKeyAnswers409WithThePaymentAndNeverCharges(t *testing.T) {
	t.Parallel()
	e := servicetest.New(t)
	first := e.Post("k-old", servicetest.Body())
	id := first.JSON(t)["paymentId"]
	janitor := cleanup.New(e.Pool, e.Clock, cleanup.Policy{
		ReplayTTL: e.Config.ReplayTTL, MetadataTTL: 720 * time.Hour, OutboxRetention: 168 * time.Hour,
	}, slog.New(slog.NewTextHandler(io.Discard, nil)))

	expired := func(when string) {
		t.Helper()
		r := e.Post("k-old", servicetest.Body())
		p := r.JSON(t)
		if r.Status != http.StatusConflict || p["code"] != "IDEMPOTENCY_KEY_EXPIRED" || p["paymentId"] != id {
			t.Fatalf("%s: %d %s", when, r.Status, r.Body)
		}
	}
	e.Clock.Advance(e.Config.ReplayTTL - time.Second)
	if r := e.Post("k-old", servicetest.Body()); r.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("inside the window: %d %s", r.Status, r.Body)
	}
	e.Clock.Advance(time.Second)
	expired("at the end of the window")
	if _, err := janitor.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := e.Count("idempotency_keys WHERE response_body IS NULL"); n != 1 {
		t.Fatalf("the stored body was not erased")
	}
	expired("after clean-up erased the body")
	if r := e.Post("k-old", servicetest.Body("amount", `"11.00"`)); r.Status != http.StatusUnprocessableEntity {
		t.Errorf("different command after the window: %d %s", r.Status, r.Body)
	}

	e.Clock.Advance(720 * time.Hour)
	if _, err := janitor.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := e.Count("idempotency_keys"); n != 0 {
		t.Fatalf("the key outlived its metadata retention")
	}
	// The same command under the forgotten key derives the payment's id
	// again: the payment is recognised, and the key answered as expired.
	expired("after clean-up deleted the key")
	if n := e.Count("idempotency_keys"); n != 0 {
		t.Fatalf("the expired answer left a key behind")
	}
	// Another command under it is another payment, which the merchant
	// reference still guards.
	r := e.Post("k-old", servicetest.Body("amount", `"11.00"`))
	if r.Status != http.StatusConflict || r.JSON(t)["code"] != "DUPLICATE_MERCHANT_REFERENCE" || r.JSON(t)["paymentId"] != id {
		t.Errorf("forgotten key, another command, same reference: %d %s", r.Status, r.Body)
	}
	if c := e.Sim.Charges(); len(c) != 1 || c[0].RequestCount != 1 {
		t.Errorf("charges %+v: expiry must never charge again", c)
	}
	if got := e.Metric("paymentsapi_idempotency_conflicts_total", map[string]string{"reason": "expired"}); got != 3 {
		t.Errorf("expired metric = %v, want 3", got)
	}
}
