package httpapi_test

import (
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
	"github.com/paymentsapi/paymentsapi/internal/servicetest"
)

// The spec is the contract of whatever is registered: every route the
// server has (the registered operations' and its own) is an operation of
// api/openapi.yaml, and every operation of the spec is a route. An
// operation registered without its routes in the spec, or a route renamed
// in one place only, fails here.
func TestEveryRouteIsInTheSpec(t *testing.T) {
	t.Parallel()
	core := app.New(app.Deps{
		Provider: simclient.New("http://127.0.0.1:1", nil), Clock: clock.System{}, Log: servicetest.TestLogger(),
		Metrics: metrics.New(prometheus.NewRegistry()),
	}, app.Config{StripeWebhookSecret: "whsec_test"})
	srv := httpapi.NewServer(core.HTTPDeps(httpapi.Deps{}))
	var routes []string
	err := chi.Walk(srv.(chi.Routes), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		route = strings.TrimSuffix(strings.TrimSuffix(route, "/*"), "/")
		if route == "/docs" && method != http.MethodGet {
			return nil // the reference page is mounted for every method; it serves GET
		}
		routes = append(routes, method+" "+route)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	doc, err := openapi3.NewLoader().LoadFromData(api.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	var spec []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			spec = append(spec, method+" "+path)
		}
	}
	slices.Sort(routes)
	routes = slices.Compact(routes)
	slices.Sort(spec)
	for _, r := range routes {
		if !slices.Contains(spec, r) && !strings.HasPrefix(r, "GET /docs/") { // the reference page's own assets
			t.Errorf("route %s is not in api/openapi.yaml", r)
		}
	}
	for _, s := range spec {
		if !slices.Contains(routes, s) {
			t.Errorf("api/openapi.yaml's %s is no route of the server", s)
		}
	}
	if len(routes) < 6 {
		t.Fatalf("only %d routes walked: %v", len(routes), routes)
	}
}
