package httpapi_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/paymentsapi/paymentsapi/api"
)

// The spec is the contract of whatever is registered: every route the
// server has (the registered operations' and its own) is an operation of
// api/openapi.yaml, and every operation of the spec is a route. An
// operation registered without its routes in the spec, or a route renamed
// in one place only, fails here.
func TestEveryRouteIsInTheSpec(t *testing.T) {
	t.Parallel()
	var routes []string
	for _, r := range serverRoutes(t) {
		route := strings.TrimSuffix(strings.TrimSuffix(r.pattern, "/*"), "/")
		if route == "/docs" && r.method != http.MethodGet {
			continue // the reference page is mounted for every method; it serves GET
		}
		routes = append(routes, r.method+" "+route)
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
	routes = slices.Compact(slices.Sorted(slices.Values(routes)))
	for _, r := range routes {
		if !slices.Contains(spec, r) && !strings.HasPrefix(r, "GET /docs/") { // the reference page's own assets
			t.Errorf("route %s is not in api/openapi.yaml", r)
		}
	}
	for _, s := range slices.Sorted(slices.Values(spec)) {
		if !slices.Contains(routes, s) {
			t.Errorf("api/openapi.yaml's %s is no route of the server", s)
		}
	}
	if len(routes) < 6 {
		t.Fatalf("only %d routes walked: %v", len(routes), routes)
	}
}
