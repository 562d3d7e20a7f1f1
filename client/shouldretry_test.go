package client_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/paymentsapi/paymentsapi/client"
)

// advising answers as s does, with the server's Payments-Should-Retry.
func advising(value string, s step) step {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(client.ShouldRetryHeader, value)
		s(w, r)
	}
}

func TestShouldRetryFalseEndsTheCallEvenOnWhatTheRuleWouldRetry(t *testing.T) {
	t.Parallel()
	for name, first := range map[string]step{
		"500":                        problem(500, "INTERNAL", ""),
		"503":                        problem(503, "SERVICE_UNAVAILABLE", "1"),
		"502 from a proxy":           func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "bad gateway", http.StatusBadGateway) },
		"429":                        problem(429, "RATE_LIMITED", "1"),
		"409 IDEMPOTENCY_KEY_IN_USE": problem(409, "IDEMPOTENCY_KEY_IN_USE", "1"),
	} {
		for _, value := range []string{"false", " FALSE "} {
			t.Run(name+" "+value, func(t *testing.T) {
				t.Parallel()
				s := newScripted(t, advising(value, first), created)
				clk := newFakeClock()
				res, err := s.client(clk, 0.5, client.RetryPolicy{}).CreatePayment(context.Background(), payReq())
				var p *client.Error
				if !errors.As(err, &p) || p.Status == 0 {
					t.Fatalf("error %v, result %+v; want the first answer's problem", err, res)
				}
				if n, w := len(s.requests()), clk.waits(); n != 1 || len(w) != 0 {
					t.Errorf("%d requests and waits %v, want 1 and none: the server said not to retry", n, w)
				}
			})
		}
	}
	// A read too.
	s := newScripted(t, advising("false", problem(503, "SERVICE_UNAVAILABLE", "")), created)
	if _, err := s.client(newFakeClock(), 0.5, client.RetryPolicy{}).GetPayment(context.Background(), "pay_1"); err == nil || len(s.requests()) != 1 {
		t.Errorf("GET answered 503 with false: error %v after %d requests, want an error after 1", err, len(s.requests()))
	}
}

func TestShouldRetryTrueAllowsARetryOfWhatTheRuleWouldNot(t *testing.T) {
	t.Parallel()
	for name, first := range map[string]step{
		"400":                          problem(400, "VALIDATION_FAILED", ""),
		"409 DUPLICATE_MERCHANT_REF":   problem(409, "DUPLICATE_MERCHANT_REFERENCE", ""),
		"402 (no server sends it)":     problem(402, "PAYMENT_DECLINED", ""),
		"503 (the rule agrees)":        problem(503, "SERVICE_UNAVAILABLE", ""),
		"a value in another case True": advising("True", problem(404, "NOT_FOUND", "")),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := newScripted(t, advising("true", first), created)
			res, err := s.client(newFakeClock(), 0.5, client.RetryPolicy{}).CreatePayment(context.Background(), payReq())
			if err != nil {
				t.Fatal(err)
			}
			if res.StatusCode != 201 || res.Attempts != 2 {
				t.Errorf("result %+v, want 201 on the second attempt", res)
			}
			reqs := s.requests()
			if len(reqs) != 2 || reqs[0].Header.Get("Idempotency-Key") != reqs[1].Header.Get("Idempotency-Key") {
				t.Errorf("%d requests, keys differ or missing: a retry keeps the key", len(reqs))
			}
		})
	}
	// A read that the rule never retries on a conflict.
	s := newScripted(t, advising("true", problem(409, "IDEMPOTENCY_KEY_IN_USE", "")), func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(paymentJSON))
	})
	if _, err := s.client(newFakeClock(), 0.5, client.RetryPolicy{}).GetPayment(context.Background(), "pay_1"); err != nil || len(s.requests()) != 2 {
		t.Errorf("GET answered 409 with true: error %v after %d requests, want the payment after 2", err, len(s.requests()))
	}
}

func TestShouldRetryTrueStaysWithinTheAttemptsAndTheBudget(t *testing.T) {
	t.Parallel()
	s := newScripted(t, advising("true", problem(400, "VALIDATION_FAILED", "")))
	_, err := s.client(newFakeClock(), 0.5, client.RetryPolicy{MaxAttempts: 3, Budget: client.Budget{Ratio: 1, Burst: 10}}).CreatePayment(context.Background(), payReq())
	var p *client.Error
	if !errors.As(err, &p) || p.Status != 400 || len(s.requests()) != 3 {
		t.Errorf("error %v after %d requests, want the 400 after MaxAttempts = 3", err, len(s.requests()))
	}

	s = newScripted(t, advising("true", problem(503, "SERVICE_UNAVAILABLE", "")))
	_, err = s.client(newFakeClock(), 0.5, client.RetryPolicy{Budget: client.Budget{Ratio: 0.1, Burst: 1}}).CreatePayment(context.Background(), payReq())
	if !errors.Is(err, client.ErrBudgetExhausted) || len(s.requests()) != 2 {
		t.Errorf("error %v after %d requests, want ErrBudgetExhausted after 2 (one retry of the burst)", err, len(s.requests()))
	}
}

func TestAnAbsentOrUnreadableShouldRetryLeavesTheRule(t *testing.T) {
	t.Parallel()
	for _, value := range []string{"", "maybe", "1"} {
		retried := newScripted(t, advising(value, problem(503, "SERVICE_UNAVAILABLE", "")), created)
		if res, err := retried.client(newFakeClock(), 0.5, client.RetryPolicy{}).CreatePayment(context.Background(), payReq()); err != nil || res.Attempts != 2 {
			t.Errorf("503 with %q: error %v after %d requests, want a retry", value, err, len(retried.requests()))
		}
		final := newScripted(t, advising(value, problem(400, "VALIDATION_FAILED", "")), created)
		if _, err := final.client(newFakeClock(), 0.5, client.RetryPolicy{}).CreatePayment(context.Background(), payReq()); err == nil || len(final.requests()) != 1 {
			t.Errorf("400 with %q: error %v after %d requests, want the 400 after 1", value, err, len(final.requests()))
		}
	}
	// The decline stays a *DeclinedError, told by the server not to retry.
	s := newScripted(t, advising("false", problem(402, "PAYMENT_DECLINED", "")))
	_, err := s.client(newFakeClock(), 0.5, client.RetryPolicy{}).CreatePayment(context.Background(), payReq())
	var declined *client.DeclinedError
	if !errors.As(err, &declined) || declined.Problem.PaymentID != "pay_1" {
		t.Errorf("error %v, want a DeclinedError", err)
	}
}
