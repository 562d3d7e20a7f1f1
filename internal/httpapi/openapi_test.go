package httpapi_test

import (
	"strings"
	"testing"

	"github.com/paymentsapi/paymentsapi/internal/servicetest"
)

// The answers the HTTP layer gives before any operation runs (a request
// refused at the door, a rate limit, a dead database, the operations
// endpoints) are the ones the spec documents and CONTRACT.md promises
// (servicetest.CheckSpec).
func TestTheHTTPLayersAnswersConformToTheOpenAPISpec(t *testing.T) {
	t.Parallel()
	servicetest.CheckSpec(t,
		servicetest.SpecGroup{Name: "rejected create requests", Run: func(t *testing.T, c *servicetest.Conformance) {
			noKey := servicetest.CreateHeaders(secretA, "")
			delete(noKey, "Idempotency-Key")
			noAuth := servicetest.CreateHeaders("", "k")
			delete(noAuth, "Authorization")
			textPlain := servicetest.CreateHeaders(secretA, "k")
			textPlain["Content-Type"] = "text/plain"
			// Valid JSON and a valid command, padded past 16 KiB: only the
			// size is wrong, which no schema keyword can say.
			tooLarge := servicetest.Body() + strings.Repeat(" ", 17<<10)
			for _, x := range []servicetest.Exchange{
				{Name: "401 no credentials", Header: noAuth, Body: servicetest.Body(), Status: 401, Code: "UNAUTHORIZED", SpecRejects: "security requirements failed"},
				{Name: "401 unknown secret", Header: servicetest.CreateHeaders("sk_test_unknown", "k"), Body: servicetest.Body(), Status: 401, Code: "UNAUTHORIZED"},
				{Name: "400 key missing", Header: noKey, Body: servicetest.Body(), Status: 400, Code: "IDEMPOTENCY_KEY_MISSING", SpecRejects: `"Idempotency-Key" in header`},
				{Name: "400 key too long", Header: servicetest.CreateHeaders(secretA, strings.Repeat("k", 256)), Body: servicetest.Body(), Status: 400, Code: "IDEMPOTENCY_KEY_INVALID"},
				{Name: "400 malformed JSON", Header: servicetest.CreateHeaders(secretA, "k"), Body: `{"accountId":`, Status: 400, Code: "MALFORMED_JSON", SpecRejects: "failed to decode request body"},
				{Name: "400 unknown field", Header: servicetest.CreateHeaders(secretA, "k"), Body: servicetest.Body("extra", `"x"`), Status: 400, Code: "VALIDATION_FAILED", SpecRejects: "extra"},
				{Name: "400 amount not a string", Header: servicetest.CreateHeaders(secretA, "k"), Body: servicetest.Body("amount", `10`), Status: 400, Code: "VALIDATION_FAILED", SpecRejects: "/amount"},
				{Name: "400 too many fraction digits", Header: servicetest.CreateHeaders(secretA, "k"), Body: servicetest.Body("amount", `"10.001"`), Status: 400, Code: "VALIDATION_FAILED"},
				{Name: "413 body too large", Header: servicetest.CreateHeaders(secretA, "k"), Body: tooLarge, Status: 413, Code: "PAYLOAD_TOO_LARGE"},
				{Name: "415 wrong content type", Header: textPlain, Body: servicetest.Body(), Status: 415, Code: "UNSUPPORTED_MEDIA_TYPE", SpecRejects: `Content-Type has unexpected value "text/plain"`},
			} {
				x.Method, x.Path = "POST", "/payments"
				c.Check(x)
			}
			if n := c.E.Count("payments"); n != 0 {
				t.Errorf("rejected requests wrote %d payments", n)
			}
		}},
		servicetest.SpecGroup{Name: "rate limited", Options: []servicetest.Option{servicetest.WithRateLimit(1, 2)}, Run: func(t *testing.T, c *servicetest.Conformance) {
			created := c.Check(servicetest.Exchange{
				Name: "201 created", Method: "POST", Path: "/payments", Header: servicetest.CreateHeaders(secretA, "k-1"), Body: servicetest.Body(),
				Status: 201, Headers: []string{"Location"},
			})
			payment := created.Header.Get("Location")
			c.Check(servicetest.Exchange{Name: "200 get a payment", Method: "GET", Path: payment, Header: servicetest.Bearer(secretA), Status: 200})
			limited := func(name, method, path, body string, header map[string]string) servicetest.Exchange {
				return servicetest.Exchange{Name: name, Method: method, Path: path, Header: header, Body: body,
					Status: 429, Code: "RATE_LIMITED", Headers: []string{"Retry-After"}}
			}
			for _, x := range []servicetest.Exchange{
				limited("429 create", "POST", "/payments", servicetest.Body("merchantReference", `"inv-2"`), servicetest.CreateHeaders(secretA, "k-2")),
				limited("429 list", "GET", "/payments", "", servicetest.Bearer(secretA)),
				limited("429 get", "GET", payment, "", servicetest.Bearer(secretA)),
				limited("429 refund", "POST", payment+"/refunds", `{"amount":"1.00"}`, servicetest.CreateHeaders(secretA, "r-1")),
				limited("429 list refunds", "GET", payment+"/refunds", "", servicetest.Bearer(secretA)),
				limited("429 get a refund", "GET", payment+"/refunds/re_x", "", servicetest.Bearer(secretA)),
				limited("429 capture", "POST", payment+"/capture", `{}`, servicetest.CreateHeaders(secretA, "c-1")),
				limited("429 cancel", "POST", payment+"/cancel", `{}`, servicetest.CreateHeaders(secretA, "x-1")),
			} {
				c.Check(x)
			}
		}},
		servicetest.SpecGroup{Name: "operations endpoints", Run: func(t *testing.T, c *servicetest.Conformance) {
			for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
				c.Check(servicetest.Exchange{Name: "200 " + path, Method: "GET", Path: path, Status: 200})
			}
		}},
		servicetest.SpecGroup{Name: "database unavailable", Run: func(t *testing.T, c *servicetest.Conformance) {
			// The same wiring as TestDatabaseDownIs503: authentication works,
			// the payments store and readiness check see a dead database.
			c.E.URL = c.E.DeadStoreURL(false)
			c.Check(servicetest.Exchange{
				Name: "503 create", Method: "POST", Path: "/payments", Header: servicetest.CreateHeaders(secretA, "k"), Body: servicetest.Body(),
				Status: 503, Code: "SERVICE_UNAVAILABLE", Headers: []string{"Retry-After"},
			})
			c.Check(servicetest.Exchange{
				Name: "503 list", Method: "GET", Path: "/payments", Header: servicetest.Bearer(secretA),
				Status: 503, Code: "SERVICE_UNAVAILABLE", Headers: []string{"Retry-After"},
			})
			c.Check(servicetest.Exchange{
				Name: "503 capture", Method: "POST", Path: "/payments/pay_x/capture", Header: servicetest.CreateHeaders(secretA, "c"), Body: `{}`,
				Status: 503, Code: "SERVICE_UNAVAILABLE", Headers: []string{"Retry-After"},
			})
			c.Check(servicetest.Exchange{
				Name: "503 cancel", Method: "POST", Path: "/payments/pay_x/cancel", Header: servicetest.CreateHeaders(secretA, "x"), Body: `{}`,
				Status: 503, Code: "SERVICE_UNAVAILABLE", Headers: []string{"Retry-After"},
			})
			c.Check(servicetest.Exchange{Name: "503 readyz", Method: "GET", Path: "/readyz", Status: 503, Code: "SERVICE_UNAVAILABLE"})
		}},
	)
}
