package payouts_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/go-chi/chi/v5"

	"github.com/paymentsapi/paymentsapi/api"
	"github.com/paymentsapi/paymentsapi/examples/payouts"
	"github.com/paymentsapi/paymentsapi/internal/apispec"
	"github.com/paymentsapi/paymentsapi/internal/operation"
)

// The payouts' part of the spec, merged into api/openapi.yaml as `make
// spec` merges it for a registered module, is a valid document that holds
// every route the operation serves, its problem code, its events' names
// and its id member of Problem; and the routes the module declares (those
// a provider without the port answers 501) are those it serves.
func TestThePayoutsPartOfTheSpecIsWholeAndValid(t *testing.T) {
	t.Parallel()
	m := payouts.Module()
	merged, err := apispec.Merge(api.OpenAPI, []operation.Module{m})
	if err != nil {
		t.Fatal(err)
	}
	doc, err := openapi3.NewLoader().LoadFromData(merged)
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("the merged document is invalid: %v", err)
	}
	again, err := apispec.Merge(merged, []operation.Module{m})
	if err != nil {
		t.Fatal(err)
	}
	if same, err := apispec.Equal(again, merged); err != nil || !same {
		t.Errorf("merging twice is not merging once (%v)", err)
	}

	var served []string
	r := chi.NewRouter()
	payouts.NewService(payouts.Deps{}, payouts.Config{}).Routes(r, nil)
	if err := chi.Walk(r, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		served = append(served, method+" "+route)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	slices.Sort(served)
	declared := slices.Sorted(slices.Values(m.Routes))
	if !slices.Equal(served, declared) {
		t.Errorf("served %v, declared %v", served, declared)
	}
	for _, route := range served {
		method, path, _ := strings.Cut(route, " ")
		if item := doc.Paths.Find(path); item == nil || item.GetOperation(method) == nil {
			t.Errorf("%s is not in the spec", route)
		}
	}
	schemas := doc.Components.Schemas
	if !slices.Contains(schemas["ProblemCode"].Value.Enum, any(string(payouts.CodeDeclined))) {
		t.Errorf("ProblemCode lacks %s", payouts.CodeDeclined)
	}
	if !slices.Contains(schemas["EventType"].Value.Enum, any("payout.succeeded")) {
		t.Error("EventType lacks payout.succeeded")
	}
	if schemas["Problem"].Value.Properties[payouts.IDField] == nil {
		t.Errorf("Problem lacks %s", payouts.IDField)
	}
}
