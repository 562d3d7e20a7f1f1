package refunds_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/provider/sim"
	"github.com/paymentsapi/paymentsapi/internal/refunds"
	"github.com/paymentsapi/paymentsapi/internal/servicetest"
)

// Every row of the refund contract that is not about concurrency.
func TestRefundContract(t *testing.T) {
	t.Parallel()
	e := servicetest.New(t)
	pay := e.Pay("pm_card_visa", "inv-1")

	created := e.Refund(pay, "r-1", `{"amount":"3.00","reason":"requested_by_customer"}`)
	if created.Status != http.StatusCreated {
		t.Fatalf("refund: %d %s", created.Status, created.Body)
	}
	v := created.JSON(t)
	refundID, _ := v["refundId"].(string)
	if v["status"] != "SUCCEEDED" || v["amount"] != "3.00" || v["currency"] != "EUR" || v["paymentId"] != pay ||
		created.Header.Get("Location") != "/payments/"+pay+"/refunds/"+refundID || v["providerReference"] == nil {
		t.Errorf("created: %v %v", created.Header, v)
	}
	provRefunds := e.ProviderRefunds(e.ChargeOf(pay))
	if len(provRefunds) != 1 || provRefunds[0].IdempotencyKey != refunds.ProviderKey(refundID) || provRefunds[0].RequestCount != 1 {
		t.Errorf("provider refunds %+v: want one, keyed by the refund", provRefunds)
	}
	if n := e.Metric("paymentsapi_provider_call_duration_seconds", map[string]string{"operation": "refund", "outcome": "succeeded"}); n != 1 {
		t.Errorf("refund calls measured: %v, want 1", n)
	}
	if g := e.Get(servicetest.SecretA, "/payments/"+pay).JSON(t); g["refundedAmount"] != "3.00" {
		t.Errorf("payment refundedAmount %v", g["refundedAmount"])
	}

	// Same key, same command, in any spelling: the stored answer, byte for byte.
	replay := e.Refund(pay, "r-1", `{ "reason":"requested_by_customer", "amount":"3" }`)
	if replay.Status != http.StatusCreated || !bytes.Equal(replay.Body, created.Body) || replay.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("replay: %d %s", replay.Status, replay.Body)
	}
	// Same key, another command.
	if r := e.Refund(pay, "r-1", `{"amount":"4.00"}`); r.Status != http.StatusUnprocessableEntity || r.JSON(t)["code"] != "IDEMPOTENCY_KEY_REUSED" {
		t.Errorf("reused: %d %s", r.Status, r.Body)
	}
	// The payment's own key string is another operation's key.
	if r := e.Refund(pay, "pay-inv-1", `{"amount":"1.00"}`); r.Status != http.StatusCreated {
		t.Errorf("a payment key reused for a refund: %d %s", r.Status, r.Body)
	}
	// More than is left (10 - 3 - 1 = 6): refused, not stored.
	over := e.Refund(pay, "r-over", `{"amount":"6.01"}`)
	if over.Status != http.StatusConflict || over.JSON(t)["code"] != "REFUND_EXCEEDS_REFUNDABLE" || over.JSON(t)["refundableAmount"] != "6.00" {
		t.Errorf("over: %d %s", over.Status, over.Body)
	}
	if r := e.Refund(pay, "r-over", `{"amount":"6.00"}`); r.Status != http.StatusCreated {
		t.Errorf("the refused key was stored: %d %s", r.Status, r.Body)
	}

	// Lists and reads, tenant-scoped.
	list := e.Get(servicetest.SecretA, "/payments/"+pay+"/refunds").JSON(t)["items"].([]any)
	if len(list) != 3 {
		t.Errorf("%d refunds listed, want 3", len(list))
	}
	if r := e.Get(servicetest.SecretA, "/payments/"+pay+"/refunds/"+refundID); r.Status != http.StatusOK || r.JSON(t)["refundId"] != refundID {
		t.Errorf("get: %d %s", r.Status, r.Body)
	}
	for _, path := range []string{"/payments/" + pay + "/refunds/" + refundID, "/payments/" + pay + "/refunds"} {
		if r := e.Get(servicetest.SecretB, path); r.Status != http.StatusNotFound || r.JSON(t)["code"] != "NOT_FOUND" {
			t.Errorf("another tenant reads %s: %d", path, r.Status)
		}
	}
	if r := e.RefundAs(servicetest.SecretB, pay, "r-b", `{"amount":"1.00"}`); r.Status != http.StatusNotFound {
		t.Errorf("another tenant refunds: %d %s", r.Status, r.Body)
	}
	if r := e.Refund("pay_nope", "r-x", `{"amount":"1.00"}`); r.Status != http.StatusNotFound || r.JSON(t)["code"] != "NOT_FOUND" {
		t.Errorf("unknown payment: %d %s", r.Status, r.Body)
	}

	// A payment that did not succeed cannot be refunded; nothing is stored.
	declinedPay := e.Post("pay-d", servicetest.Body("merchantReference", `"inv-d"`, "paymentMethod", `"pm_card_chargeDeclined"`)).JSON(t)["paymentId"].(string)
	if r := e.Refund(declinedPay, "r-d", `{"amount":"1.00"}`); r.Status != http.StatusConflict || r.JSON(t)["code"] != "PAYMENT_NOT_REFUNDABLE" {
		t.Errorf("declined payment: %d %s", r.Status, r.Body)
	}
	if n := e.Count(`idempotency_keys WHERE operation = $1 AND idempotency_key = 'r-d'`, refunds.OperationCreate); n != 0 {
		t.Errorf("a refused refund stored its key")
	}

	// Bad requests, each with its code, none stored.
	bad := []struct {
		key, ctype, body string
		status           int
		code             string
	}{
		{"", "application/json", `{"amount":"1.00"}`, 400, "IDEMPOTENCY_KEY_MISSING"},
		{"r-bad", "application/json", `{"amount":"1.001"}`, 400, "VALIDATION_FAILED"},
		{"r-bad", "application/json", `{"amount":"0"}`, 400, "VALIDATION_FAILED"},
		{"r-bad", "application/json", `{"amount":"1.00","reason":"because"}`, 400, "VALIDATION_FAILED"},
		{"r-bad", "application/json", `{"amount":"1.00","currency":"EUR"}`, 400, "VALIDATION_FAILED"},
		{"r-bad", "application/json", `{"amount":`, 400, "MALFORMED_JSON"},
		{"r-bad", "text/plain", `{"amount":"1.00"}`, 415, "UNSUPPORTED_MEDIA_TYPE"},
		{"r-bad", "application/json", `{"reason":"` + string(bytes.Repeat([]byte("x"), 17<<10)) + `"}`, 413, "PAYLOAD_TOO_LARGE"},
	}
	for _, b := range bad {
		h := map[string]string{"Authorization": "Bearer " + servicetest.SecretA, "Content-Type": b.ctype}
		if b.key != "" {
			h["Idempotency-Key"] = b.key
		}
		r := e.Do("POST", "/payments/"+pay+"/refunds", []byte(b.body), h)
		if r.Status != b.status || r.JSON(t)["code"] != b.code {
			t.Errorf("%s %.40s: %d %s, want %d %s", b.ctype, b.body, r.Status, r.Body, b.status, b.code)
		}
	}
	if n := e.Count(`idempotency_keys WHERE idempotency_key = 'r-bad'`); n != 0 {
		t.Errorf("a bad request stored its key")
	}
}

// A refund the provider declines is a 402 REFUND_DECLINED, stored and
// replayed; it frees its amount for another refund.
func TestDeclinedRefundIsStoredAndFreesItsAmount(t *testing.T) {
	t.Parallel()
	e := servicetest.New(t)
	pay := e.Pay(sim.MethodRefundDeclined, "inv-1")
	first := e.Refund(pay, "r-1", `{"amount":"10.00"}`)
	if first.Status != http.StatusPaymentRequired || first.JSON(t)["code"] != "REFUND_DECLINED" || first.JSON(t)["refundId"] == nil {
		t.Fatalf("declined: %d %s", first.Status, first.Body)
	}
	again := e.Refund(pay, "r-1", `{"amount":"10.00"}`)
	if again.Status != http.StatusPaymentRequired || !bytes.Equal(again.Body, first.Body) || again.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("replay of a decline: %d %s", again.Status, again.Body)
	}
	// Declined refunds hold nothing: the whole amount can be asked again
	// (and is declined again by this payment method).
	if r := e.Refund(pay, "r-2", `{"amount":"10.00"}`); r.Status != http.StatusPaymentRequired {
		t.Errorf("after a decline: %d %s", r.Status, r.Body)
	}
	if g := e.Get(servicetest.SecretA, "/payments/"+pay).JSON(t); g["refundedAmount"] != "0.00" {
		t.Errorf("refundedAmount %v", g["refundedAmount"])
	}
}

// 20 concurrent refunds of 1.00 under 20 keys on a 10.00 payment: exactly
// ten are taken, the rest refused; the provider refunds exactly 10.00.
func TestConcurrentRefundsNeverExceedThePayment(t *testing.T) {
	t.Parallel()
	e := servicetest.New(t)
	pay := e.Pay("pm_card_visa", "inv-1")
	const n = 20
	statuses := make([]int, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			statuses[i] = e.Refund(pay, fmt.Sprintf("r-%d", i), `{"amount":"1.00"}`).Status
		})
	}
	close(start)
	wg.Wait()
	count := map[int]int{}
	for _, s := range statuses {
		count[s]++
	}
	if count[http.StatusCreated] != 10 || count[http.StatusConflict] != 10 {
		t.Errorf("answers %v: want 10 created and 10 refused", count)
	}
	var sum int64
	for _, r := range e.ProviderRefunds(e.ChargeOf(pay)) {
		sum += r.AmountMinor
	}
	if sum != 1000 {
		t.Errorf("the provider refunded %d cents of a 1000-cent payment", sum)
	}
	if g := e.Get(servicetest.SecretA, "/payments/"+pay).JSON(t); g["refundedAmount"] != "10.00" {
		t.Errorf("refundedAmount %v", g["refundedAmount"])
	}
}

// 20 concurrent requests with one key: one refund at the provider, created
// by one request; every answer is the refund or "in use".
func TestConcurrentSameKeyRefundsOnce(t *testing.T) {
	t.Parallel()
	e := servicetest.New(t)
	pay := e.Pay("pm_card_visa", "inv-1")
	const n = 20
	answers := make([]servicetest.Response, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			answers[i] = e.Refund(pay, "r-same", `{"amount":"2.50"}`)
		})
	}
	close(start)
	wg.Wait()
	for _, a := range answers {
		if a.Status != http.StatusCreated && a.Status != http.StatusConflict {
			t.Errorf("answer %d %s", a.Status, a.Body)
		}
	}
	got := e.ProviderRefunds(e.ChargeOf(pay))
	if len(got) != 1 || got[0].RequestCount != 1 || got[0].AmountMinor != 250 {
		t.Errorf("provider refunds %+v: want one of 250, created by one request", got)
	}
	if n := e.Count("refunds"); n != 1 {
		t.Errorf("%d refunds stored", n)
	}
}

// The provider refunded but its answer was lost: 202 PROCESSING, then the
// reconciler asks the provider (never refunds again) and the retry gets the
// resolved answer; the ledger event is written once.
func TestUnknownRefundIsResolvedByTheReconciler(t *testing.T) {
	t.Parallel()
	e := servicetest.New(t, servicetest.WithProviderTimeout(300*time.Millisecond))
	pay := e.Pay(sim.MethodRefundTimeoutAfterSuccess, "inv-1")
	first := e.Refund(pay, "r-1", `{"amount":"4.00"}`)
	if first.Status != http.StatusAccepted || first.JSON(t)["status"] != "PROCESSING" || first.Header.Get("Retry-After") == "" {
		t.Fatalf("lost answer: %d %s", first.Status, first.Body)
	}
	stats, err := e.Core.Reconciler.RunOnce(context.Background(), 10)
	if err != nil || stats["succeeded"] != 1 {
		t.Fatalf("reconciler: %v %v", stats, err)
	}
	retry := e.Refund(pay, "r-1", `{"amount":"4.00"}`)
	if retry.Status != http.StatusCreated || retry.JSON(t)["status"] != "SUCCEEDED" {
		t.Errorf("retry after reconciliation: %d %s", retry.Status, retry.Body)
	}
	got := e.ProviderRefunds(e.ChargeOf(pay))
	if len(got) != 1 || got[0].RequestCount != 1 {
		t.Errorf("provider refunds %+v: want one, created by one request", got)
	}
	if n := e.Count(`outbox_events WHERE event_type = 'RefundSucceeded'`); n != 1 {
		t.Errorf("RefundSucceeded events = %d", n)
	}
	if g := e.Get(servicetest.SecretA, "/payments/"+pay).JSON(t); g["refundedAmount"] != "4.00" {
		t.Errorf("refundedAmount %v", g["refundedAmount"])
	}
}

// A refund keeps the contract every operation keeps (servicetest.Contract).
func TestRefundsKeepTheOperationContract(t *testing.T) {
	t.Parallel()
	servicetest.Contract(t, servicetest.Operation{
		Path: func(e *servicetest.Env, method string) string {
			return "/payments/" + e.Pay(method, "inv-contract") + "/refunds"
		},
		Body:      func(string) string { return `{"amount":"3.00"}` },
		OtherBody: func(string) string { return `{"amount":"4.00"}` },
		Method:    sim.MethodVisa, LostMethod: sim.MethodRefundTimeoutAfterSuccess,
	})
}
