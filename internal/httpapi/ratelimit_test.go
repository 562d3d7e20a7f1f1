package httpapi_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/servicetest"
)

// rateLimited checks that r is the 429 RATE_LIMITED answer, with a
// Retry-After of want seconds.
func rateLimited(t *testing.T, what string, r servicetest.Response, want string) {
	t.Helper()
	if r.Status != http.StatusTooManyRequests || r.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("%s: got %d %s %s, want a 429 problem", what, r.Status, r.Header.Get("Content-Type"), r.Body)
	}
	if code := r.JSON(t)["code"]; code != "RATE_LIMITED" {
		t.Errorf("%s: code %v, want RATE_LIMITED", what, code)
	}
	if got := r.Header.Get("Retry-After"); got != want {
		t.Errorf("%s: Retry-After %q, want %q", what, got, want)
	}
	if r.Header.Get("Idempotent-Replayed") != "" {
		t.Errorf("%s: a 429 marked as a replay", what)
	}
}

// Over its limit a tenant gets 429 before the idempotency engine: nothing is
// recorded for the key, so the same request with the same key, sent once
// the bucket has refilled, is a first request that succeeds, not a replay.
func TestRateLimitAnswers429AndNeverRecordsTheKey(t *testing.T) {
	t.Parallel()
	e := servicetest.New(t, servicetest.WithRateLimit(1, 2))
	for i, ref := range []string{"inv-1", "inv-2"} {
		if r := e.Post("k-"+ref, servicetest.Body("merchantReference", `"`+ref+`"`)); r.Status != http.StatusCreated {
			t.Fatalf("request %d of a burst of 2: %d %s", i+1, r.Status, r.Body)
		}
	}
	limited := servicetest.Body("merchantReference", `"inv-3"`)
	rateLimited(t, "third request of the burst", e.Post("k-3", limited), "1")
	rateLimited(t, "its retry at once", e.Post("k-3", limited), "1")
	if n := e.Count("idempotency_keys WHERE idempotency_key = 'k-3'"); n != 0 {
		t.Errorf("the limited request's key was recorded: %d rows", n)
	}
	if n := e.Count("payments"); n != 2 {
		t.Errorf("%d payments after two created and two limited", n)
	}

	e.Clock.Advance(500 * time.Millisecond)
	rateLimited(t, "half a token later", e.Post("k-3", limited), "1")
	e.Clock.Advance(500 * time.Millisecond)
	r := e.Post("k-3", limited)
	if r.Status != http.StatusCreated || r.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("the retry once a token is back: %d replayed=%q %s", r.Status, r.Header.Get("Idempotent-Replayed"), r.Body)
	}
	// Reads count too, and a long pause refills no more than the burst.
	rateLimited(t, "a read with the bucket empty", e.Get(secretA, "/payments"), "1")
	e.Clock.Advance(time.Hour)
	for i := range 2 {
		if r := e.Get(secretA, "/payments/"+r.JSON(t)["paymentId"].(string)); r.Status != http.StatusOK {
			t.Fatalf("read %d after a pause: %d %s", i+1, r.Status, r.Body)
		}
	}
	rateLimited(t, "a third read after a pause", e.Get(secretA, "/payments"), "1")
}

// Each tenant has its own bucket; requests without a valid secret get 401,
// never 429, and use up no tenant's tokens.
func TestRateLimitIsPerTenant(t *testing.T) {
	t.Parallel()
	e := servicetest.New(t, servicetest.WithRateLimit(0.5, 1))
	if r := e.Post("k-1", servicetest.Body()); r.Status != http.StatusCreated {
		t.Fatalf("tenant A's first request: %d %s", r.Status, r.Body)
	}
	rateLimited(t, "tenant A's second request", e.Get(secretA, "/payments"), "2")
	for range 3 {
		if r := e.Get("sk_test_unknown", "/payments"); r.Status != http.StatusUnauthorized {
			t.Fatalf("an unknown secret: %d %s, want 401", r.Status, r.Body)
		}
	}
	if r := e.PostAs(secretB, "k-1", servicetest.Body()); r.Status != http.StatusCreated {
		t.Fatalf("tenant B while A is limited: %d %s", r.Status, r.Body)
	}
	rateLimited(t, "tenant B's second request", e.Get(secretB, "/payments"), "2")
}
