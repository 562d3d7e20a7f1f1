package httpapi_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/servicetest"
)

// shouldRetry is the Payments-Should-Retry header of r ("" when absent).
func shouldRetry(r servicetest.Response) string { return r.Header.Get("Payments-Should-Retry") }

// expectAdvice fails unless r has status and Payments-Should-Retry: want.
func expectAdvice(t *testing.T, what string, r servicetest.Response, status int, want string) {
	t.Helper()
	if r.Status != status || shouldRetry(r) != want {
		t.Errorf("%s: %d with Payments-Should-Retry %q, want %d with %q\n%s", what, r.Status, shouldRetry(r), status, want, r.Body)
	}
}

func TestEveryErrorAnswerSaysWhetherToRetryIt(t *testing.T) {
	e := servicetest.New(t, servicetest.WithSlowDelay(time.Second))

	created := e.Post("k-ok", servicetest.Body())
	if created.Status != http.StatusCreated || shouldRetry(created) != "" {
		t.Errorf("a success: %d with Payments-Should-Retry %q, want 201 without the header", created.Status, shouldRetry(created))
	}

	expectAdvice(t, "400 invalid field", e.Post("k-bad", servicetest.Body("amount", `"-1"`)), http.StatusBadRequest, "false")
	expectAdvice(t, "401 unknown secret", e.PostAs("sk_nobody", "k-x", servicetest.Body()), http.StatusUnauthorized, "false")
	expectAdvice(t, "404 unknown payment", e.Get(secretA, "/payments/pay_nothing"), http.StatusNotFound, "false")
	expectAdvice(t, "422 key reused", e.Post("k-ok", servicetest.Body("amount", `"11.00"`)), http.StatusUnprocessableEntity, "false")
	expectAdvice(t, "409 duplicate merchant reference", e.Post("k-dup", servicetest.Body()), http.StatusConflict, "false")

	declined := servicetest.Body("merchantReference", `"inv-d"`, "paymentMethod", `"pm_card_chargeDeclined"`)
	expectAdvice(t, "402 declined", e.Post("k-d", declined), http.StatusPaymentRequired, "false")
	replay := e.Post("k-d", declined)
	expectAdvice(t, "402 declined, replayed", replay, http.StatusPaymentRequired, "false")
	if replay.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("the decline's retry is not a replay: %v", replay.Header)
	}

	expectAdvice(t, "503 provider unavailable",
		e.Post("k-down", servicetest.Body("merchantReference", `"inv-u"`, "paymentMethod", `"pm_sim_unavailable"`)),
		http.StatusServiceUnavailable, "true")

	slow := servicetest.Body("merchantReference", `"inv-s"`, "paymentMethod", `"pm_sim_slow"`)
	done := make(chan servicetest.Response)
	go func() { done <- e.Post("k-slow", slow) }()
	servicetest.WaitFor(t, func() bool { return e.Count("payments WHERE state = 'PROVIDER_REQUEST_SENT'") == 1 })
	expectAdvice(t, "409 key in use", e.Post("k-slow", slow), http.StatusConflict, "true")
	if r := <-done; r.Status != http.StatusCreated {
		t.Errorf("the slow original: %d %s", r.Status, r.Body)
	}

	e.URL = e.DeadStoreURL(false)
	expectAdvice(t, "503 database unavailable", e.Post("k-db", servicetest.Body("merchantReference", `"inv-db"`)),
		http.StatusServiceUnavailable, "true")
}

func TestARateLimitedAnswerSaysToRetry(t *testing.T) {
	e := servicetest.New(t, servicetest.WithRateLimit(0.5, 1))
	if r := e.Get(secretA, "/payments"); r.Status != http.StatusOK {
		t.Fatalf("first request: %d %s", r.Status, r.Body)
	}
	expectAdvice(t, "429 rate limited", e.Get(secretA, "/payments"), http.StatusTooManyRequests, "true")
}
