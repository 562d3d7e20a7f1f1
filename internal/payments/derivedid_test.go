package payments_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paymentsapi/paymentsapi/internal/apikeys"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
	"github.com/paymentsapi/paymentsapi/internal/servicetest"
)

// loseTail deletes from pool every row a payment's request wrote (its
// payment, transitions, key and events), as an asynchronous standby that
// never received those commits would lack them after its promotion.
func loseTail(t testing.TB, pool *pgxpool.Pool) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), `TRUNCATE payments, idempotency_keys, outbox_events CASCADE`); err != nil {
		t.Fatal(err)
	}
}

// A payment's id is derived from its scope and command: after a failover
// that lost its commits, the client's retry with its key recreates the same
// payment, on another database as on the same one, and the provider,
// asked with the same key, answers the original charge: one charge.
func TestLostTailRetryRecreatesThePaymentAndChargesOnce(t *testing.T) {
	t.Parallel()
	e := servicetest.New(t)
	first := e.Post("k-tail", servicetest.Body())
	if first.Status != http.StatusCreated {
		t.Fatalf("first: %d %s", first.Status, first.Body)
	}
	id := first.JSON(t)["paymentId"]

	// Another database (a promoted standby that never saw the payment),
	// another engine, the same provider.
	standby := pgtest.NewPool(t)
	if _, err := apikeys.Add(context.Background(), standby, apikeys.Hasher{}, []apikeys.Pair{{Tenant: "tenant_a", Secret: servicetest.SecretA}}, e.Clock.Now()); err != nil {
		t.Fatal(err)
	}
	url, _, _ := servicetest.StartInstance(t, standby, e.Provider, e.Clock, e.Config, e.RateLimit)
	promoted := &servicetest.Env{T: t, URL: url, Pool: standby}
	retry := promoted.Post("k-tail", servicetest.Body())
	if retry.Status != http.StatusCreated || retry.JSON(t)["paymentId"] != id || retry.JSON(t)["status"] != "SUCCEEDED" {
		t.Fatalf("retry on the promoted database: %d %s, want 201 with %v", retry.Status, retry.Body, id)
	}

	// The same database, its tail lost.
	loseTail(t, e.Pool)
	again := e.Post("k-tail", servicetest.Body())
	if again.Status != http.StatusCreated || again.JSON(t)["paymentId"] != id {
		t.Fatalf("retry after the lost tail: %d %s, want 201 with %v", again.Status, again.Body, id)
	}
	if c := e.Sim.Charges(); len(c) != 1 || c[0].RequestCount != 3 || e.ChargesFor(id.(string)) == nil {
		t.Fatalf("charges %+v: want one charge of %v, asked three times", c, id)
	}

	// Another command, another key or another tenant: another payment.
	other := e.Post("k-tail-2", servicetest.Body("merchantReference", `"invoice-other"`))
	if other.Status != http.StatusCreated || other.JSON(t)["paymentId"] == id {
		t.Fatalf("another key: %d %s", other.Status, other.Body)
	}
	loseTail(t, e.Pool)
	changed := e.Post("k-tail", servicetest.Body("amount", `"12.00"`))
	if changed.Status != http.StatusCreated || changed.JSON(t)["paymentId"] == id {
		t.Fatalf("the key with another command after the lost tail: %d %s", changed.Status, changed.Body)
	}
	tenantB := e.PostAs(servicetest.SecretB, "k-tail", servicetest.Body())
	if tenantB.Status != http.StatusCreated || tenantB.JSON(t)["paymentId"] == id {
		t.Fatalf("another tenant's key: %d %s", tenantB.Status, tenantB.Body)
	}
	if c := e.Sim.Charges(); len(c) != 4 {
		t.Fatalf("charges %+v: want four, one per payment", c)
	}
}

// A refund's and a capture's ids are derived too: the same command under a
// key whose record clean-up deleted recognises the refund or capture it
// made, and is answered as expired, naming it; neither the provider nor
// the database is asked to move money again.
func TestDeletedKeyOfARefundOrCaptureAnswersExpired(t *testing.T) {
	t.Parallel()
	e := servicetest.New(t)
	paymentID := e.Pay("pm_card_visa", "inv-refund")
	first := e.Refund(paymentID, "k-refund", `{"amount":"3.00"}`)
	if first.Status != http.StatusCreated {
		t.Fatalf("refund: %d %s", first.Status, first.Body)
	}
	refundID := first.JSON(t)["refundId"]

	manual := e.ManualPayment("pm_card_visa", "inv-capture")
	capturePath := "/payments/" + manual + "/capture"
	capture := func() servicetest.Response {
		return e.Do("POST", capturePath, []byte(`{}`), map[string]string{
			"Authorization": "Bearer " + servicetest.SecretA, "Idempotency-Key": "k-capture", "Content-Type": "application/json",
		})
	}
	captured := capture()
	if captured.Status != http.StatusOK {
		t.Fatalf("capture: %d %s", captured.Status, captured.Body)
	}
	var captureID string // the answer is the payment: the capture's id is in the database
	if err := e.Pool.QueryRow(context.Background(), `SELECT id FROM payment_actions WHERE payment_id = $1`, manual).Scan(&captureID); err != nil {
		t.Fatal(err)
	}

	if _, err := e.Pool.Exec(context.Background(),
		`DELETE FROM idempotency_keys WHERE idempotency_key IN ('k-refund', 'k-capture')`); err != nil {
		t.Fatal(err)
	}
	again := e.Refund(paymentID, "k-refund", `{"amount":"3.00"}`)
	if p := again.JSON(t); again.Status != http.StatusConflict || p["code"] != "IDEMPOTENCY_KEY_EXPIRED" || p["refundId"] != refundID {
		t.Errorf("the refund's deleted key: %d %s, want 409 IDEMPOTENCY_KEY_EXPIRED naming %v", again.Status, again.Body, refundID)
	}
	recaptured := capture()
	if p := recaptured.JSON(t); recaptured.Status != http.StatusConflict || p["code"] != "IDEMPOTENCY_KEY_EXPIRED" || p["captureId"] != captureID {
		t.Errorf("the capture's deleted key: %d %s, want 409 IDEMPOTENCY_KEY_EXPIRED naming %v", recaptured.Status, recaptured.Body, captureID)
	}
	if n := e.Count("refunds"); n != 1 {
		t.Errorf("%d refunds, want 1", n)
	}
	if r := e.ProviderRefunds(e.ChargeOf(paymentID)); len(r) != 1 || r[0].RequestCount != 1 {
		t.Errorf("provider refunds %+v: want one, asked once", r)
	}
	if c := e.ChargesFor(manual); len(c) != 1 || c[0].CaptureRequestCount != 1 {
		t.Errorf("provider charges of the manual payment %+v: want one, captured once", c)
	}
	// Another command under the refund's key is another refund.
	other := e.Refund(paymentID, "k-refund", `{"amount":"2.00"}`)
	if other.Status != http.StatusCreated || other.JSON(t)["refundId"] == refundID {
		t.Errorf("another command under the deleted key: %d %s, want a new refund", other.Status, other.Body)
	}
}
