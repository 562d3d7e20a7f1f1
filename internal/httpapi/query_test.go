package httpapi_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/paymentsapi/paymentsapi/api"
	"github.com/paymentsapi/paymentsapi/internal/app"
	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/httpapi"
	"github.com/paymentsapi/paymentsapi/internal/metrics"
	"github.com/paymentsapi/paymentsapi/internal/provider/simclient"
	"github.com/paymentsapi/paymentsapi/internal/query"
	"github.com/paymentsapi/paymentsapi/internal/servicetest"
)

// route is one route of the server, with the query parameters its handler
// declares (query.Declare).
type route struct {
	method, pattern string
	params          []string
}

// serverRoutes walks the routes of the server as the service wires it.
func serverRoutes(t *testing.T) []route {
	t.Helper()
	core := app.New(app.Deps{
		Provider: simclient.New("http://127.0.0.1:1", nil), Clock: clock.System{}, Log: servicetest.TestLogger(),
		Metrics: metrics.New(prometheus.NewRegistry()),
	}, app.Config{StripeWebhookSecret: "whsec_test"})
	srv := httpapi.NewServer(core.HTTPDeps(httpapi.Deps{}))
	var routes []route
	err := chi.Walk(srv.(chi.Routes), func(method, pattern string, h http.Handler, _ ...func(http.Handler) http.Handler) error {
		if ch, ok := h.(*chi.ChainHandler); ok { // a route of a group: its own handler is the chain's end
			h = ch.Endpoint
		}
		routes = append(routes, route{method: method, pattern: pattern, params: query.Names(h)})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return routes
}

// unguarded are the routes outside the API's authenticated groups, which
// take their query strings as they come: the probes and the metrics (a
// scraper may add its own parameters), the spec and its reference page,
// Stripe's webhooks (Stripe's URL, not ours to police), and the
// customer's return from an authentication (the provider adds its own
// parameters, which the service ignores).
func unguarded(r route) bool {
	switch r.pattern {
	case "/healthz", "/readyz", "/metrics", "/openapi.yaml", "/webhooks/stripe", "/payments/{paymentId}/return":
		return true
	}
	return strings.HasPrefix(r.pattern, "/docs")
}

// problemFields are the fields a VALIDATION_FAILED problem names, with
// their messages.
func problemFields(t *testing.T, r servicetest.Response) map[string]string {
	t.Helper()
	var p struct {
		Code   string
		Errors []struct{ Field, Message string }
	}
	if err := json.Unmarshal(r.Body, &p); err != nil || r.Status != http.StatusBadRequest || p.Code != "VALIDATION_FAILED" {
		t.Fatalf("want 400 VALIDATION_FAILED, got %d %s", r.Status, r.Body)
	}
	fields := map[string]string{}
	for _, f := range p.Errors {
		fields[f.Field] = f.Message
	}
	return fields
}

// Every route of the API, every operation's and the operators', refuses a
// query parameter it does not take with 400 VALIDATION_FAILED naming each
// such parameter, as an unknown member of a body is; a route that takes
// none refuses any; a parameter the route takes is refused when it comes
// twice. All before the handler runs: a command's body, its key and its
// resource are not looked at.
func TestEveryRouteRefusesQueryParametersItDoesNotTake(t *testing.T) {
	t.Parallel()
	e := servicetest.New(t, servicetest.WithOperators(t))
	routes := serverRoutes(t)
	checked := 0
	for _, r := range routes {
		if unguarded(r) {
			continue
		}
		path := strings.NewReplacer("{paymentId}", "pay_x", "{refundId}", "re_x", "{eventId}", "0190aaaa-0000-7000-8000-000000000000",
			"{endpointId}", "we_x").Replace(r.pattern)
		secret := secretA
		if r.pattern == "/audit-events" {
			secret = servicetest.OperatorSecret
		}
		send := func(rawQuery string) servicetest.Response {
			return e.Do(r.method, path+"?"+rawQuery, []byte(`{}`), map[string]string{
				"Authorization": "Bearer " + secret, "Idempotency-Key": "k-query", "Content-Type": "application/json",
			})
		}
		fields := problemFields(t, send("bogus=1&limit=5&Other=%C3%A9"))
		if !strings.HasPrefix(fields["bogus"], query.UnknownMessage) || !strings.HasPrefix(fields["Other"], query.UnknownMessage) {
			t.Errorf("%s %s: unknown parameters not named: %v", r.method, r.pattern, fields)
		}
		if _, named := fields["limit"]; named == slices.Contains(r.params, "limit") {
			t.Errorf("%s %s takes %v, yet limit is named %v: %v", r.method, r.pattern, r.params, named, fields)
		}
		for _, p := range r.params {
			if msg := problemFields(t, send(p+"=a&"+p+"=b"))[p]; msg != query.RepeatedMessage {
				t.Errorf("%s %s: %s given twice: %q", r.method, r.pattern, p, msg)
			}
		}
		checked++
	}
	if checked < 15 {
		t.Fatalf("only %d routes checked: %v", checked, routes)
	}
	// Nothing ran: no payment, no key was stored by the commands refused.
	if n := e.Count("idempotency_keys"); n != 0 {
		t.Errorf("%d idempotency keys stored by refused requests", n)
	}
}

// The parameters a listing takes are not refused; a pair net/url would
// drop (a semicolon), or that is not URL-encoded text, is refused rather
// than ignored.
func TestAListingTakesItsParametersAndRefusesWhatItWouldIgnore(t *testing.T) {
	t.Parallel()
	e := servicetest.New(t)
	if r := e.Get(secretA, "/payments?status=SUCCEEDED,DECLINED&accountId=acc_1&limit=5&createdFrom=2026-01-01T00:00:00Z"); r.Status != http.StatusOK {
		t.Errorf("a listing with its parameters: %d %s", r.Status, r.Body)
	}
	if r := e.Get(secretA, "/events?type=payment.created&paymentId=pay_x&createdFrom=2026-01-01T00:00:00Z&createdTo=2026-02-01T00:00:00Z"); r.Status != http.StatusOK {
		t.Errorf("the event log with its parameters: %d %s", r.Status, r.Body)
	}
	for raw, field := range map[string]string{
		"limit=5;status=FAILED": "limit",
		"status=%ZZ":            "status",
		"accountId=%00":         "accountId",
		"%FF=1":                 "%FF",
	} {
		if msg := problemFields(t, e.Get(secretA, "/payments?"+raw))[field]; msg != query.EncodingMessage {
			t.Errorf("%s: %s: %q", raw, field, msg)
		}
	}
}

// The spec is the contract of every route's query string: the query
// parameters a route's handler takes are exactly those its operation in
// api/openapi.yaml lists.
func TestEachRouteTakesTheQueryParametersOfItsSpec(t *testing.T) {
	t.Parallel()
	doc, err := openapi3.NewLoader().LoadFromData(api.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range serverRoutes(t) {
		item := doc.Paths.Value(strings.TrimSuffix(strings.TrimSuffix(r.pattern, "/*"), "/"))
		if item == nil || item.GetOperation(r.method) == nil {
			continue // TestEveryRouteIsInTheSpec names it
		}
		var spec []string
		for _, p := range item.GetOperation(r.method).Parameters {
			if p.Value != nil && p.Value.In == "query" {
				spec = append(spec, p.Value.Name)
			}
		}
		if slices.Sort(spec); !slices.Equal(r.params, spec) && !unguarded(r) {
			t.Errorf("%s %s takes %v; the spec lists %v", r.method, r.pattern, r.params, spec)
		}
	}
}
