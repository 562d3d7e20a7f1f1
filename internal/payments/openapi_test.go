package payments_test

import (
	"bytes"
	"encoding/json"
	"net/url"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/provider/units"
	"github.com/paymentsapi/paymentsapi/internal/servicetest"
)

// Every answer of POST /payments and of the payments' reads, in each way
// it ends, is the one the spec documents and CONTRACT.md promises
// (servicetest.CheckSpec).
func TestPaymentAnswersConformToTheOpenAPISpec(t *testing.T) {
	t.Parallel()
	servicetest.CheckSpec(t,
		servicetest.SpecGroup{Name: "create, replay, decline, conflicts, reads", Run: func(t *testing.T, c *servicetest.Conformance) {
			created := c.Check(servicetest.Exchange{
				Name: "201 created", Method: "POST", Path: "/payments", Header: servicetest.CreateHeaders(servicetest.SecretA, "k-1"), Body: servicetest.Body(),
				Status: 201, Headers: []string{"Location"},
			})
			replay := c.Check(servicetest.Exchange{
				Name: "201 replayed", Method: "POST", Path: "/payments", Header: servicetest.CreateHeaders(servicetest.SecretA, "k-1"), Body: servicetest.Body(),
				Status: 201, Headers: []string{"Location", "Idempotent-Replayed"}, Replayed: true,
			})
			if !bytes.Equal(replay.Body, created.Body) {
				t.Errorf("the replay is not the original body byte for byte:\n%s\n%s", created.Body, replay.Body)
			}
			declineBody := servicetest.Body("merchantReference", `"invoice-7782"`, "paymentMethod", `"pm_card_insufficientFunds"`)
			c.Check(servicetest.Exchange{
				Name: "402 declined", Method: "POST", Path: "/payments", Header: servicetest.CreateHeaders(servicetest.SecretA, "k-2"), Body: declineBody,
				Status: 402, Code: "PAYMENT_DECLINED", Members: []string{"paymentId", "declineCode"},
			})
			c.Check(servicetest.Exchange{
				Name: "402 replayed", Method: "POST", Path: "/payments", Header: servicetest.CreateHeaders(servicetest.SecretA, "k-2"), Body: declineBody,
				Status: 402, Code: "PAYMENT_DECLINED", Members: []string{"paymentId", "declineCode"}, Headers: []string{"Idempotent-Replayed"}, Replayed: true,
			})
			c.Check(servicetest.Exchange{
				Name: "422 key reused for another command", Method: "POST", Path: "/payments", Header: servicetest.CreateHeaders(servicetest.SecretA, "k-1"),
				Body: servicetest.Body("amount", `"11.00"`), Status: 422, Code: "IDEMPOTENCY_KEY_REUSED",
			})
			c.Check(servicetest.Exchange{
				Name: "409 duplicate merchant reference", Method: "POST", Path: "/payments", Header: servicetest.CreateHeaders(servicetest.SecretA, "k-3"), Body: servicetest.Body(),
				Status: 409, Code: "DUPLICATE_MERCHANT_REFERENCE", Members: []string{"paymentId"},
			})

			location := created.Header.Get("Location")
			c.Check(servicetest.Exchange{Name: "200 get one payment", Method: "GET", Path: location, Header: servicetest.Bearer(servicetest.SecretA), Status: 200})
			c.Check(servicetest.Exchange{
				Name: "404 unknown payment", Method: "GET", Path: "/payments/pay_doesnotexist", Header: servicetest.Bearer(servicetest.SecretA),
				Status: 404, Code: "NOT_FOUND",
			})
			c.Check(servicetest.Exchange{
				Name: "404 another tenant's payment", Method: "GET", Path: location, Header: servicetest.Bearer(servicetest.SecretB),
				Status: 404, Code: "NOT_FOUND",
			})

			first := c.Check(servicetest.Exchange{
				Name: "200 list, first page", Method: "GET", Path: "/payments?accountId=acc_1&limit=1", Header: servicetest.Bearer(servicetest.SecretA), Status: 200,
			})
			var page struct {
				Items      []json.RawMessage `json:"items"`
				NextCursor string            `json:"nextCursor"`
			}
			if err := json.Unmarshal(first.Body, &page); err != nil || len(page.Items) != 1 || page.NextCursor == "" {
				t.Fatalf("first page of two payments: want one item and a nextCursor: %s", first.Body)
			}
			last := c.Check(servicetest.Exchange{
				Name: "200 list, last page", Method: "GET", Path: "/payments?accountId=acc_1&limit=1&cursor=" + url.QueryEscape(page.NextCursor),
				Header: servicetest.Bearer(servicetest.SecretA), Status: 200,
			})
			if bytes.Contains(last.Body, []byte(`"nextCursor"`)) {
				t.Errorf("the last page has a nextCursor: %s", last.Body)
			}
			c.Check(servicetest.Exchange{
				Name: "400 list limit out of range", Method: "GET", Path: "/payments?limit=0", Header: servicetest.Bearer(servicetest.SecretA),
				Status: 400, Code: "VALIDATION_FAILED", SpecRejects: `parameter "limit"`,
			})
			c.Check(servicetest.Exchange{
				Name: "400 list cursor not issued", Method: "GET", Path: "/payments?cursor=nope", Header: servicetest.Bearer(servicetest.SecretA),
				Status: 400, Code: "VALIDATION_FAILED",
			})
			c.Check(servicetest.Exchange{
				Name: "200 list, every filter", Method: "GET", Header: servicetest.Bearer(servicetest.SecretA), Status: 200,
				Path: "/payments?accountId=acc_1&merchantReference=invoice-7781&status=SUCCEEDED,DECLINED&createdFrom=2026-01-01T00:00:00Z&createdTo=2099-01-01T00:00:00%2B01:00&currency=eur&amountMin=1&amountMax=10.00",
			})
			for _, bad := range []struct{ name, query string }{
				{"an amount without its currency", "amountMin=10.00"},
				{"an unsupported currency", "currency=XXX&amountMax=10"},
				{"more fraction digits than the currency has", "currency=JPY&amountMin=10.5"},
				{"a range upside down", "currency=EUR&amountMin=20&amountMax=10"},
			} {
				c.Check(servicetest.Exchange{
					Name: "400 list, " + bad.name, Method: "GET", Path: "/payments?" + bad.query, Header: servicetest.Bearer(servicetest.SecretA),
					Status: 400, Code: "VALIDATION_FAILED",
				})
			}
			c.Check(servicetest.Exchange{
				Name: "400 list, an unknown status", Method: "GET", Path: "/payments?status=SUCCEEDED,EXPLODED", Header: servicetest.Bearer(servicetest.SecretA),
				Status: 400, Code: "VALIDATION_FAILED", SpecRejects: `parameter "status"`,
			})
			c.Check(servicetest.Exchange{
				Name: "400 list, a time that is not one", Method: "GET", Path: "/payments?createdFrom=yesterday", Header: servicetest.Bearer(servicetest.SecretA),
				Status: 400, Code: "VALIDATION_FAILED", SpecRejects: `parameter "createdFrom"`,
			})
			c.Check(servicetest.Exchange{
				Name: "400 list, an unknown parameter", Method: "GET", Path: "/payments?state=FAILED", Header: servicetest.Bearer(servicetest.SecretA),
				Status: 400, Code: "VALIDATION_FAILED",
			})
			c.Check(servicetest.Exchange{
				Name: "400 a payment, any parameter", Method: "GET", Path: location + "?expand=refunds", Header: servicetest.Bearer(servicetest.SecretA),
				Status: 400, Code: "VALIDATION_FAILED",
			})
			c.Check(servicetest.Exchange{
				Name: "400 create, a query parameter", Method: "POST", Path: "/payments?dryRun=true", Header: servicetest.CreateHeaders(servicetest.SecretA, "k-q"), Body: servicetest.Body(),
				Status: 400, Code: "VALIDATION_FAILED",
			})
			c.Check(servicetest.Exchange{
				Name: "401 list without credentials", Method: "GET", Path: "/payments", Status: 401, Code: "UNAUTHORIZED", SpecRejects: "security requirements failed",
			})
		}},
		servicetest.SpecGroup{Name: "what the provider would refuse", Options: []servicetest.Option{servicetest.WithSimRules(units.Stripe())}, Run: func(t *testing.T, c *servicetest.Conformance) {
			for _, x := range []servicetest.Exchange{
				{Name: "400 amount not supported by the provider", Header: servicetest.CreateHeaders(servicetest.SecretA, "k-bhd"),
					Body: servicetest.Body("amount", `"1.234"`, "currency", `"BHD"`), Status: 400, Code: "AMOUNT_NOT_SUPPORTED_BY_PROVIDER"},
				{Name: "400 unknown test payment method", Header: servicetest.CreateHeaders(servicetest.SecretA, "k-typo"),
					Body: servicetest.Body("paymentMethod", `"pm_card_vsia"`), Status: 400, Code: "UNKNOWN_TEST_PAYMENT_METHOD"},
			} {
				x.Method, x.Path = "POST", "/payments"
				c.Check(x)
			}
			if n := c.E.Count("payments"); n != 0 {
				t.Errorf("refused requests wrote %d payments", n)
			}
		}},
		servicetest.SpecGroup{Name: "outcome unknown", Options: []servicetest.Option{servicetest.WithProviderTimeout(300 * time.Millisecond)}, Run: func(t *testing.T, c *servicetest.Conformance) {
			r := c.Check(servicetest.Exchange{
				Name: "202 provider timed out", Method: "POST", Path: "/payments", Header: servicetest.CreateHeaders(servicetest.SecretA, "k-lost"),
				Body: servicetest.Body("paymentMethod", `"pm_sim_timeout_after_success"`), Status: 202, Headers: []string{"Location", "Retry-After"},
			})
			if got := r.JSON(t)["status"]; got != "PROCESSING" {
				t.Errorf("202 with status %v, want PROCESSING", got)
			}
			c.Check(servicetest.Exchange{Name: "200 get a payment in doubt", Method: "GET", Path: r.Header.Get("Location"), Header: servicetest.Bearer(servicetest.SecretA), Status: 200})
		}},
		servicetest.SpecGroup{Name: "original in flight", Options: []servicetest.Option{servicetest.WithSlowDelay(time.Second)}, Run: func(t *testing.T, c *servicetest.Conformance) {
			slow := servicetest.Exchange{
				Name: "201 slow original", Method: "POST", Path: "/payments", Header: servicetest.CreateHeaders(servicetest.SecretA, "k-slow"),
				Body: servicetest.Body("paymentMethod", `"pm_sim_slow"`), Status: 201, Headers: []string{"Location"},
			}
			var original servicetest.Response
			done := make(chan struct{})
			go func() { defer close(done); original = c.Send(slow) }()
			defer func() { <-done }() // never leave the original running past the test
			servicetest.WaitFor(t, func() bool { return c.E.Count("payments WHERE state = 'PROVIDER_REQUEST_SENT'") == 1 })
			inUse := slow
			inUse.Name, inUse.Status, inUse.Code, inUse.Headers = "409 key in use", 409, "IDEMPOTENCY_KEY_IN_USE", []string{"Retry-After"}
			c.Check(inUse)
			<-done
			c.Verify(slow, original)
			c.Check(servicetest.Exchange{
				Name: "201 replayed after the original finished", Method: "POST", Path: "/payments", Header: servicetest.CreateHeaders(servicetest.SecretA, "k-slow"),
				Body: slow.Body, Status: 201, Headers: []string{"Location", "Idempotent-Replayed"}, Replayed: true,
			})
		}},
		servicetest.SpecGroup{Name: "provider unavailable", Run: func(t *testing.T, c *servicetest.Conformance) {
			r := c.Check(servicetest.Exchange{
				Name: "503 provider refused", Method: "POST", Path: "/payments", Header: servicetest.CreateHeaders(servicetest.SecretA, "k-down"),
				Body: servicetest.Body("paymentMethod", `"pm_sim_unavailable"`), Status: 503, Code: "PROVIDER_UNAVAILABLE", Headers: []string{"Retry-After"},
			})
			if r.Status != 503 {
				return
			}
			got := c.Check(servicetest.Exchange{Name: "200 get a failed payment", Method: "GET", Path: "/payments/" + c.E.OnlyPaymentID(), Header: servicetest.Bearer(servicetest.SecretA), Status: 200})
			if s := got.JSON(t)["status"]; s != "FAILED" {
				t.Errorf("payment after 503 PROVIDER_UNAVAILABLE: status %v, want FAILED", s)
			}
		}},
		servicetest.SpecGroup{Name: "key past its replay window", Run: func(t *testing.T, c *servicetest.Conformance) {
			c.Check(servicetest.Exchange{
				Name: "201 created", Method: "POST", Path: "/payments", Header: servicetest.CreateHeaders(servicetest.SecretA, "k-old"), Body: servicetest.Body(),
				Status: 201, Headers: []string{"Location"},
			})
			c.E.Clock.Advance(c.E.Config.ReplayTTL)
			c.Check(servicetest.Exchange{
				Name: "409 key expired", Method: "POST", Path: "/payments", Header: servicetest.CreateHeaders(servicetest.SecretA, "k-old"), Body: servicetest.Body(),
				Status: 409, Code: "IDEMPOTENCY_KEY_EXPIRED", Members: []string{"paymentId"},
			})
		}},
	)
}
