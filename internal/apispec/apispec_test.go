package apispec_test

import (
	"os"
	"testing"

	"github.com/paymentsapi/paymentsapi/api"
	"github.com/paymentsapi/paymentsapi/internal/apispec"
	"github.com/paymentsapi/paymentsapi/internal/app"
)

// api/openapi.yaml holds what every module of app.Modules contributes (its
// part, its problem codes, its events' names, its id member of Problem):
// registering a module fails here until `make spec` merges it in, and that
// target is this test with SPEC_WRITE=1.
func TestTheSpecHoldsEveryRegisteredModule(t *testing.T) {
	t.Parallel()
	merged, err := apispec.Merge(api.OpenAPI, app.Modules(app.Config{}))
	if err != nil {
		t.Fatal(err)
	}
	same, err := apispec.Equal(merged, api.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	if same {
		return
	}
	if os.Getenv("SPEC_WRITE") == "1" {
		if err := os.WriteFile("../../api/openapi.yaml", merged, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Log("wrote api/openapi.yaml; run make generate for the clients")
		return
	}
	t.Error("api/openapi.yaml lacks what a registered module contributes: run make spec")
}
