package httpapi_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/paymentsapi/paymentsapi/internal/servicetest"
)

func TestDatabaseDownIs503(t *testing.T) {
	t.Parallel()
	e := servicetest.New(t)
	// The payments store is down (authentication still works): the create
	// itself cannot be claimed.
	e.URL = e.DeadStoreURL(false)
	r := e.Post("k-down", servicetest.Body())
	if r.Status != http.StatusServiceUnavailable || r.JSON(t)["code"] != "SERVICE_UNAVAILABLE" || r.Header.Get("Retry-After") == "" {
		t.Fatalf("create with the database down: %d %v %s", r.Status, r.Header, r.Body)
	}
	if r := e.Get(secretA, "/readyz"); r.Status != http.StatusServiceUnavailable {
		t.Errorf("readyz with the database down: %d", r.Status)
	}

	// Everything is down: even authentication answers 503, not 401 or 500.
	e.URL = e.DeadStoreURL(true)
	if r := e.Post("k-down", servicetest.Body()); r.Status != http.StatusServiceUnavailable || r.JSON(t)["code"] != "SERVICE_UNAVAILABLE" {
		t.Fatalf("auth with the database down: %d %s", r.Status, r.Body)
	}
	if n := len(e.Sim.Charges()); n != 0 {
		t.Errorf("the provider was called: %d charges", n)
	}
}

func TestOperationsEndpoints(t *testing.T) {
	t.Parallel()
	e := servicetest.New(t)
	e.Post("k-1", servicetest.Body())
	e.Post("k-1", servicetest.Body())
	for path, want := range map[string]string{
		"/healthz":      `"ok"`,
		"/readyz":       `"ok"`,
		"/openapi.yaml": "openapi: 3.1.0",
		"/metrics":      "paymentsapi_idempotency_replays_total 1",
	} {
		r := e.Do("GET", path, nil, nil)
		if r.Status != http.StatusOK || !strings.Contains(string(r.Body), want) {
			t.Errorf("GET %s: %d, want %q in %.300s", path, r.Status, want, r.Body)
		}
	}
	// Requests are measured by route pattern, never by payment id.
	r := e.Do("GET", "/metrics", nil, nil)
	if !strings.Contains(string(r.Body), `route="/payments"`) || strings.Contains(string(r.Body), "pay_") {
		t.Errorf("HTTP metrics are not labelled by route pattern")
	}
	if r := e.Do("GET", "/nope", nil, nil); r.Status != http.StatusNotFound || r.Header.Get("Content-Type") != "application/problem+json" {
		t.Errorf("unknown route: %d %s", r.Status, r.Header.Get("Content-Type"))
	}
	if r := e.Do("DELETE", "/payments", nil, map[string]string{"Authorization": "Bearer " + secretA}); r.Status != http.StatusMethodNotAllowed {
		t.Errorf("DELETE /payments: %d", r.Status)
	}
	// Every answer carries a request id; a sane one from the client is kept.
	r = e.Do("GET", "/healthz", nil, map[string]string{"X-Request-Id": "trace-42"})
	if r.Header.Get("X-Request-Id") != "trace-42" {
		t.Errorf("request id not echoed: %q", r.Header.Get("X-Request-Id"))
	}
}
