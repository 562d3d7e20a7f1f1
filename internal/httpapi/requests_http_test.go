package httpapi_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/paymentsapi/paymentsapi/api"
)

// api/requests.http, the request collection for editors, holds a request
// for every operation of the spec: a route added to the spec without one
// fails here.
func TestTheRequestCollectionCoversEveryOperation(t *testing.T) {
	t.Parallel()
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
	b, err := os.ReadFile("../../api/requests.http")
	if err != nil {
		t.Fatal(err)
	}
	line := regexp.MustCompile(`(?m)^(GET|POST|PUT|PATCH|DELETE) \{\{base\}\}([^?\s]*)`)
	variable := regexp.MustCompile(`\{\{(\w+)\}\}`)
	// A variable named after a path parameter of the spec stands for it
	// ({{refundId}} for {refundId}), so a new operation's requests need no
	// entry here; the others are the collection's second names for one.
	params := map[string]string{"manualPaymentId": "{paymentId}", "manualPaymentId2": "{paymentId}"}
	for path := range doc.Paths.Map() {
		for _, m := range regexp.MustCompile(`\{(\w+)\}`).FindAllStringSubmatch(path, -1) {
			params[m[1]] = m[0]
		}
	}
	var collection []string
	for _, m := range line.FindAllStringSubmatch(string(b), -1) {
		path := variable.ReplaceAllStringFunc(m[2], func(v string) string { return params[strings.Trim(v, "{}")] })
		collection = append(collection, m[1]+" "+path)
	}
	for _, op := range spec {
		if !slices.Contains(collection, op) {
			t.Errorf("api/requests.http has no request for %s", op)
		}
	}
	for _, r := range collection {
		if !slices.Contains(spec, r) {
			t.Errorf("api/requests.http sends %s, which is no operation of the spec", r)
		}
	}
}
