package httpapi_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/servicetest"
)

// An address that failed authentication 20 times within a minute is
// refused 429 TOO_MANY_FAILED_AUTHENTICATIONS for a minute, even with a
// valid key, and then served again; failures spread over more than a
// minute refuse nothing. Every failure is counted.
func TestAnAddressThatFailsAuthenticationTwentyTimesAMinuteIsRefusedForAMinute(t *testing.T) {
	t.Parallel()
	e := servicetest.New(t)
	for range 19 {
		if r := e.Get("sk_guess", "/payments"); r.Status != http.StatusUnauthorized {
			t.Fatalf("a wrong key: %d %s", r.Status, r.Body)
		}
	}
	e.Clock.Advance(time.Minute)
	for range 19 {
		if r := e.Get("", "/payments"); r.Status != http.StatusUnauthorized {
			t.Fatalf("no key, in a new minute: %d %s", r.Status, r.Body)
		}
	}
	if r := e.Get(secretA, "/payments"); r.Status != http.StatusOK {
		t.Fatalf("19 failures within a minute refused a valid key: %d %s", r.Status, r.Body)
	}

	e.Clock.Advance(10 * time.Second)
	if r := e.Get("sk_guess", "/payments"); r.Status != http.StatusUnauthorized {
		t.Fatalf("the 20th failure: %d %s", r.Status, r.Body)
	}
	throttled := func(what string, r servicetest.Response, retryAfter string) {
		t.Helper()
		if r.Status != http.StatusTooManyRequests || r.JSON(t)["code"] != "TOO_MANY_FAILED_AUTHENTICATIONS" ||
			r.Header.Get("Retry-After") != retryAfter || r.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s: %d Retry-After %q %s, want 429 TOO_MANY_FAILED_AUTHENTICATIONS with Retry-After %s",
				what, r.Status, r.Header.Get("Retry-After"), r.Body, retryAfter)
		}
	}
	throttled("a valid key after 20 failures", e.Get(secretA, "/payments"), "60")
	e.Clock.Advance(59 * time.Second)
	throttled("a wrong key a second before the end", e.Get("sk_guess", "/payments"), "1")
	e.Clock.Advance(time.Second)
	if r := e.Get(secretA, "/payments"); r.Status != http.StatusOK {
		t.Errorf("a valid key a minute later: %d %s", r.Status, r.Body)
	}
	if n := e.Metric("paymentsapi_auth_failures_total", nil); n != 39 {
		t.Errorf("paymentsapi_auth_failures_total = %v, want 39", n)
	}
}
