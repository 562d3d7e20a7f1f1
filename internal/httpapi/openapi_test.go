package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/stripe/stripe-go/v76/webhook"

	"github.com/jackc/pgx/v5"

	"github.com/paymentsapi/paymentsapi/api"
	"github.com/paymentsapi/paymentsapi/internal/outbox"
	"github.com/paymentsapi/paymentsapi/internal/provider"
	"github.com/paymentsapi/paymentsapi/internal/provider/units"
	"github.com/paymentsapi/paymentsapi/internal/servicetest"
)

// TestResponsesConformToTheOpenAPISpec drives the whole API through real
// exchanges, one environment per group of scenarios, and checks every request
// and every answer against api/openapi.yaml (the document that is served at
// /openapi.yaml): the status is documented for the operation, the
// Content-Type is one the spec lists for it, the body matches its schema, the
// headers the spec declares are well formed (and present where it requires
// them). Each exchange also states what CONTRACT.md promises (status,
// problem code, headers), and the test checks that the spec declares those
// headers for that answer, so a spec that stops documenting them fails too.
//
// Requests the scenario breaks on purpose (no Idempotency-Key, malformed
// JSON, ...) must be rejected by the spec as well: that proves the spec
// documents the rule the server enforces.
func TestResponsesConformToTheOpenAPISpec(t *testing.T) {
	t.Parallel()
	// Load and validate once, up front, so that a broken document fails
	// here with the loader's message rather than in every group.
	loadOpenAPISpec(t)
	faults, held := &actionFaults{}, &actionFaults{}

	groups := []struct {
		name string
		opts []servicetest.Option
		run  func(t *testing.T, c *conformance)
	}{
		{"create, replay, decline, conflicts, reads", nil, func(t *testing.T, c *conformance) {
			created := c.check(specExchange{
				name: "201 created", method: "POST", path: "/payments", header: servicetest.CreateHeaders(secretA, "k-1"), body: servicetest.Body(),
				status: 201, headers: []string{"Location"},
			})
			replay := c.check(specExchange{
				name: "201 replayed", method: "POST", path: "/payments", header: servicetest.CreateHeaders(secretA, "k-1"), body: servicetest.Body(),
				status: 201, headers: []string{"Location", "Idempotent-Replayed"}, replayed: true,
			})
			if !bytes.Equal(replay.Body, created.Body) {
				t.Errorf("the replay is not the original body byte for byte:\n%s\n%s", created.Body, replay.Body)
			}
			declineBody := servicetest.Body("merchantReference", `"invoice-7782"`, "paymentMethod", `"pm_card_insufficientFunds"`)
			c.check(specExchange{
				name: "402 declined", method: "POST", path: "/payments", header: servicetest.CreateHeaders(secretA, "k-2"), body: declineBody,
				status: 402, code: "PAYMENT_DECLINED",
			})
			c.check(specExchange{
				name: "402 replayed", method: "POST", path: "/payments", header: servicetest.CreateHeaders(secretA, "k-2"), body: declineBody,
				status: 402, code: "PAYMENT_DECLINED", headers: []string{"Idempotent-Replayed"}, replayed: true,
			})
			c.check(specExchange{
				name: "422 key reused for another command", method: "POST", path: "/payments", header: servicetest.CreateHeaders(secretA, "k-1"),
				body: servicetest.Body("amount", `"11.00"`), status: 422, code: "IDEMPOTENCY_KEY_REUSED",
			})
			c.check(specExchange{
				name: "409 duplicate merchant reference", method: "POST", path: "/payments", header: servicetest.CreateHeaders(secretA, "k-3"), body: servicetest.Body(),
				status: 409, code: "DUPLICATE_MERCHANT_REFERENCE",
			})

			location := created.Header.Get("Location")
			c.check(specExchange{name: "200 get one payment", method: "GET", path: location, header: servicetest.Bearer(secretA), status: 200})
			c.check(specExchange{
				name: "404 unknown payment", method: "GET", path: "/payments/pay_doesnotexist", header: servicetest.Bearer(secretA),
				status: 404, code: "NOT_FOUND",
			})
			c.check(specExchange{
				name: "404 another tenant's payment", method: "GET", path: location, header: servicetest.Bearer(secretB),
				status: 404, code: "NOT_FOUND",
			})

			first := c.check(specExchange{
				name: "200 list, first page", method: "GET", path: "/payments?accountId=acc_1&limit=1", header: servicetest.Bearer(secretA), status: 200,
			})
			var page struct {
				Items      []json.RawMessage `json:"items"`
				NextCursor string            `json:"nextCursor"`
			}
			if err := json.Unmarshal(first.Body, &page); err != nil || len(page.Items) != 1 || page.NextCursor == "" {
				t.Fatalf("first page of two payments: want one item and a nextCursor: %s", first.Body)
			}
			last := c.check(specExchange{
				name: "200 list, last page", method: "GET", path: "/payments?accountId=acc_1&limit=1&cursor=" + url.QueryEscape(page.NextCursor),
				header: servicetest.Bearer(secretA), status: 200,
			})
			if bytes.Contains(last.Body, []byte(`"nextCursor"`)) {
				t.Errorf("the last page has a nextCursor: %s", last.Body)
			}
			c.check(specExchange{
				name: "400 list limit out of range", method: "GET", path: "/payments?limit=0", header: servicetest.Bearer(secretA),
				status: 400, code: "VALIDATION_FAILED", specRejects: `parameter "limit"`,
			})
			c.check(specExchange{
				name: "400 list cursor not issued", method: "GET", path: "/payments?cursor=nope", header: servicetest.Bearer(secretA),
				status: 400, code: "VALIDATION_FAILED",
			})
			c.check(specExchange{
				name: "200 list, every filter", method: "GET", header: servicetest.Bearer(secretA), status: 200,
				path: "/payments?accountId=acc_1&merchantReference=invoice-7781&status=SUCCEEDED,DECLINED&createdFrom=2026-01-01T00:00:00Z&createdTo=2099-01-01T00:00:00%2B01:00",
			})
			c.check(specExchange{
				name: "400 list, an unknown status", method: "GET", path: "/payments?status=SUCCEEDED,EXPLODED", header: servicetest.Bearer(secretA),
				status: 400, code: "VALIDATION_FAILED", specRejects: `parameter "status"`,
			})
			c.check(specExchange{
				name: "400 list, a time that is not one", method: "GET", path: "/payments?createdFrom=yesterday", header: servicetest.Bearer(secretA),
				status: 400, code: "VALIDATION_FAILED", specRejects: `parameter "createdFrom"`,
			})
			c.check(specExchange{
				name: "400 list, an unknown parameter", method: "GET", path: "/payments?state=FAILED", header: servicetest.Bearer(secretA),
				status: 400, code: "VALIDATION_FAILED",
			})
			c.check(specExchange{
				name: "400 a payment, any parameter", method: "GET", path: location + "?expand=refunds", header: servicetest.Bearer(secretA),
				status: 400, code: "VALIDATION_FAILED",
			})
			c.check(specExchange{
				name: "400 create, a query parameter", method: "POST", path: "/payments?dryRun=true", header: servicetest.CreateHeaders(secretA, "k-q"), body: servicetest.Body(),
				status: 400, code: "VALIDATION_FAILED",
			})
			c.check(specExchange{
				name: "401 list without credentials", method: "GET", path: "/payments", status: 401, code: "UNAUTHORIZED", specRejects: "security requirements failed",
			})
			c.check(specExchange{name: "200 healthz", method: "GET", path: "/healthz", status: 200})
			c.check(specExchange{name: "200 readyz", method: "GET", path: "/readyz", status: 200})
			c.check(specExchange{name: "200 metrics", method: "GET", path: "/metrics", status: 200})
		}},

		{"rejected create requests", nil, func(t *testing.T, c *conformance) {
			noKey := servicetest.CreateHeaders(secretA, "")
			delete(noKey, "Idempotency-Key")
			noAuth := servicetest.CreateHeaders("", "k")
			delete(noAuth, "Authorization")
			textPlain := servicetest.CreateHeaders(secretA, "k")
			textPlain["Content-Type"] = "text/plain"
			// Valid JSON and a valid command, padded past 16 KiB: only the
			// size is wrong, which no schema keyword can say.
			tooLarge := servicetest.Body() + strings.Repeat(" ", 17<<10)
			for _, x := range []specExchange{
				{name: "401 no credentials", header: noAuth, body: servicetest.Body(), status: 401, code: "UNAUTHORIZED", specRejects: "security requirements failed"},
				{name: "401 unknown secret", header: servicetest.CreateHeaders("sk_test_unknown", "k"), body: servicetest.Body(), status: 401, code: "UNAUTHORIZED"},
				{name: "400 key missing", header: noKey, body: servicetest.Body(), status: 400, code: "IDEMPOTENCY_KEY_MISSING", specRejects: `"Idempotency-Key" in header`},
				{name: "400 key too long", header: servicetest.CreateHeaders(secretA, strings.Repeat("k", 256)), body: servicetest.Body(), status: 400, code: "IDEMPOTENCY_KEY_INVALID"},
				{name: "400 malformed JSON", header: servicetest.CreateHeaders(secretA, "k"), body: `{"accountId":`, status: 400, code: "MALFORMED_JSON", specRejects: "failed to decode request body"},
				{name: "400 unknown field", header: servicetest.CreateHeaders(secretA, "k"), body: servicetest.Body("extra", `"x"`), status: 400, code: "VALIDATION_FAILED", specRejects: "extra"},
				{name: "400 amount not a string", header: servicetest.CreateHeaders(secretA, "k"), body: servicetest.Body("amount", `10`), status: 400, code: "VALIDATION_FAILED", specRejects: "/amount"},
				{name: "400 too many fraction digits", header: servicetest.CreateHeaders(secretA, "k"), body: servicetest.Body("amount", `"10.001"`), status: 400, code: "VALIDATION_FAILED"},
				{name: "413 body too large", header: servicetest.CreateHeaders(secretA, "k"), body: tooLarge, status: 413, code: "PAYLOAD_TOO_LARGE"},
				{name: "415 wrong content type", header: textPlain, body: servicetest.Body(), status: 415, code: "UNSUPPORTED_MEDIA_TYPE", specRejects: `Content-Type has unexpected value "text/plain"`},
			} {
				x.method, x.path = "POST", "/payments"
				c.check(x)
			}
			if n := c.e.Count("payments"); n != 0 {
				t.Errorf("rejected requests wrote %d payments", n)
			}
		}},

		{"what the provider would refuse", []servicetest.Option{servicetest.WithSimRules(units.Stripe())}, func(t *testing.T, c *conformance) {
			for _, x := range []specExchange{
				{name: "400 amount not supported by the provider", header: servicetest.CreateHeaders(secretA, "k-bhd"),
					body: servicetest.Body("amount", `"1.234"`, "currency", `"BHD"`), status: 400, code: "AMOUNT_NOT_SUPPORTED_BY_PROVIDER"},
				{name: "400 unknown test payment method", header: servicetest.CreateHeaders(secretA, "k-typo"),
					body: servicetest.Body("paymentMethod", `"pm_card_vsia"`), status: 400, code: "UNKNOWN_TEST_PAYMENT_METHOD"},
			} {
				x.method, x.path = "POST", "/payments"
				c.check(x)
			}
			if n := c.e.Count("payments"); n != 0 {
				t.Errorf("refused requests wrote %d payments", n)
			}
		}},

		{"outcome unknown", []servicetest.Option{servicetest.WithProviderTimeout(300 * time.Millisecond)}, func(t *testing.T, c *conformance) {
			r := c.check(specExchange{
				name: "202 provider timed out", method: "POST", path: "/payments", header: servicetest.CreateHeaders(secretA, "k-lost"),
				body: servicetest.Body("paymentMethod", `"pm_sim_timeout_after_success"`), status: 202, headers: []string{"Location", "Retry-After"},
			})
			if got := r.JSON(t)["status"]; got != "PROCESSING" {
				t.Errorf("202 with status %v, want PROCESSING", got)
			}
			c.check(specExchange{name: "200 get a payment in doubt", method: "GET", path: r.Header.Get("Location"), header: servicetest.Bearer(secretA), status: 200})
		}},

		{"the audit log", []servicetest.Option{servicetest.WithOperators(t)}, func(t *testing.T, c *conformance) {
			if r := c.e.Do("POST", "/webhook-endpoints", []byte(`{"url":"http://127.0.0.1:9/hook"}`), servicetest.CreateHeaders(secretA, "k-ep")); r.Status != 201 {
				t.Fatalf("create an endpoint: %d %s", r.Status, r.Body)
			}
			c.check(specExchange{name: "200 audit events", method: "GET", path: "/audit-events?limit=10", header: servicetest.Bearer(servicetest.OperatorSecret), status: 200})
			c.check(specExchange{name: "403 audit events to a tenant's key", method: "GET", path: "/audit-events", header: servicetest.Bearer(secretA),
				status: 403, code: "OPERATORS_ONLY"})
			c.check(specExchange{name: "401 audit events without a key", method: "GET", path: "/audit-events", header: nil,
				status: 401, code: "UNAUTHORIZED", specRejects: "security requirements failed"})
		}},
		{"the event log", nil, func(t *testing.T, c *conformance) {
			c.e.Pay("pm_card_visa", "inv-ev")
			refunded := c.e.Pay("pm_card_visa", "inv-ev2")
			if r := c.e.RefundAs(secretA, refunded, "ev-r", `{"amount":"1.00"}`); r.Status != 201 {
				t.Fatalf("refund: %d %s", r.Status, r.Body)
			}
			rows, err := c.e.Pool.Query(t.Context(), `SELECT id::text, event_type, aggregate_type, aggregate_id, created_at, payload FROM outbox_events`)
			if err != nil {
				t.Fatal(err)
			}
			events, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (outbox.Event, error) {
				var ev outbox.Event
				return ev, row.Scan(&ev.ID, &ev.Type, &ev.AggregateType, &ev.AggregateID, &ev.OccurredAt, &ev.Payload)
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := c.e.Core.EventLog.FanOut(t.Context(), events); err != nil { // as the relay does
				t.Fatal(err)
			}
			page := c.check(specExchange{name: "200 events", method: "GET", path: "/events?limit=2", header: servicetest.Bearer(secretA), status: 200})
			var list struct {
				Items []struct {
					EventID string `json:"eventId"`
				} `json:"items"`
				NextCursor string `json:"nextCursor"`
			}
			if err := json.Unmarshal(page.Body, &list); err != nil || len(list.Items) != 2 || list.NextCursor == "" {
				t.Fatalf("a page of events: %s", page.Body)
			}
			c.check(specExchange{name: "200 events, next page", method: "GET", path: "/events?limit=2&cursor=" + list.NextCursor, header: servicetest.Bearer(secretA), status: 200})
			c.check(specExchange{name: "200 events of a type", method: "GET", path: "/events?type=refund.succeeded", header: servicetest.Bearer(secretA), status: 200})
			c.check(specExchange{name: "200 events of a payment, of two types, in a range", method: "GET",
				path:   "/events?paymentId=" + refunded + "&type=refund.succeeded,payment.succeeded&createdFrom=2026-01-01T00:00:00Z&createdTo=2099-01-01T00:00:00%2B01:00&after=2026-01-01T00:00:00Z",
				header: servicetest.Bearer(secretA), status: 200})
			c.check(specExchange{name: "400 events, an unknown parameter", method: "GET", path: "/events?payment=" + refunded, header: servicetest.Bearer(secretA),
				status: 400, code: "VALIDATION_FAILED"})
			c.check(specExchange{name: "400 an event, any parameter", method: "GET", path: "/events/" + list.Items[0].EventID + "?expand=data",
				header: servicetest.Bearer(secretA), status: 400, code: "VALIDATION_FAILED"})
			c.check(specExchange{name: "200 an event", method: "GET", path: "/events/" + list.Items[0].EventID, header: servicetest.Bearer(secretA), status: 200})
			c.check(specExchange{name: "404 another tenant's event", method: "GET", path: "/events/" + list.Items[0].EventID, header: servicetest.Bearer(secretB),
				status: 404, code: "NOT_FOUND"})
			c.check(specExchange{name: "400 events of an unknown type", method: "GET", path: "/events?type=payment.exploded", header: servicetest.Bearer(secretA),
				status: 400, code: "VALIDATION_FAILED", specRejects: `parameter "type"`})
			c.check(specExchange{name: "400 events, a cursor not issued", method: "GET", path: "/events?cursor=nope", header: servicetest.Bearer(secretA),
				status: 400, code: "VALIDATION_FAILED"})
			c.check(specExchange{name: "401 events", method: "GET", path: "/events", status: 401, code: "UNAUTHORIZED",
				specRejects: "security requirements failed"})
		}},

		{"refunds", []servicetest.Option{servicetest.WithProviderTimeout(300 * time.Millisecond)}, func(t *testing.T, c *conformance) {
			pay := c.e.Pay("pm_card_visa", "inv-r")
			refunds := "/payments/" + pay + "/refunds"
			created := c.check(specExchange{
				name: "201 refund", method: "POST", path: refunds, header: servicetest.CreateHeaders(secretA, "r-1"),
				body: `{"amount":"3.00","reason":"requested_by_customer"}`, status: 201, headers: []string{"Location"},
			})
			c.check(specExchange{
				name: "201 refund replayed", method: "POST", path: refunds, header: servicetest.CreateHeaders(secretA, "r-1"),
				body: `{"amount":"3.00","reason":"requested_by_customer"}`, status: 201, headers: []string{"Location", "Idempotent-Replayed"}, replayed: true,
			})
			c.check(specExchange{name: "422 refund key reused", method: "POST", path: refunds, header: servicetest.CreateHeaders(secretA, "r-1"),
				body: `{"amount":"4.00"}`, status: 422, code: "IDEMPOTENCY_KEY_REUSED"})
			c.check(specExchange{name: "409 refund exceeds", method: "POST", path: refunds, header: servicetest.CreateHeaders(secretA, "r-2"),
				body: `{"amount":"7.01"}`, status: 409, code: "REFUND_EXCEEDS_REFUNDABLE"})
			c.check(specExchange{name: "404 refund of an unknown payment", method: "POST", path: "/payments/pay_none/refunds", header: servicetest.CreateHeaders(secretA, "r-3"),
				body: `{"amount":"1.00"}`, status: 404, code: "NOT_FOUND"})
			c.check(specExchange{name: "400 refund without a key", method: "POST", path: refunds, header: servicetest.Bearer(secretA),
				body: `{"amount":"1.00"}`, status: 400, code: "IDEMPOTENCY_KEY_MISSING", specRejects: "Idempotency-Key"})
			c.check(specExchange{name: "200 list refunds", method: "GET", path: refunds, header: servicetest.Bearer(secretA), status: 200})
			c.check(specExchange{name: "200 get a refund", method: "GET", path: created.Header.Get("Location"), header: servicetest.Bearer(secretA), status: 200})
			c.check(specExchange{name: "200 payment with refundedAmount", method: "GET", path: "/payments/" + pay, header: servicetest.Bearer(secretA), status: 200})

			declined := c.e.Pay("pm_sim_refund_declined", "inv-rd")
			c.check(specExchange{name: "402 refund declined", method: "POST", path: "/payments/" + declined + "/refunds", header: servicetest.CreateHeaders(secretA, "r-4"),
				body: `{"amount":"1.00"}`, status: 402, code: "REFUND_DECLINED"})
			lost := c.e.Pay("pm_sim_refund_timeout_after_success", "inv-rl")
			c.check(specExchange{name: "202 refund outcome unknown", method: "POST", path: "/payments/" + lost + "/refunds", header: servicetest.CreateHeaders(secretA, "r-5"),
				body: `{"amount":"1.00"}`, status: 202})
			notPaid := c.e.Post("k-np", servicetest.Body("merchantReference", `"inv-np"`, "paymentMethod", `"pm_card_chargeDeclined"`)).JSON(t)["paymentId"].(string)
			c.check(specExchange{name: "409 payment not refundable", method: "POST", path: "/payments/" + notPaid + "/refunds", header: servicetest.CreateHeaders(secretA, "r-6"),
				body: `{"amount":"1.00"}`, status: 409, code: "PAYMENT_NOT_REFUNDABLE"})
		}},

		{"manual capture", nil, func(t *testing.T, c *conformance) {
			auth := c.check(specExchange{
				name: "201 authorized", method: "POST", path: "/payments", header: servicetest.CreateHeaders(secretA, "k-auth"),
				body: servicetest.ManualBody("inv-c1", "pm_card_visa"), status: 201, headers: []string{"Location"},
			})
			if p := auth.JSON(t); p["status"] != "REQUIRES_CAPTURE" || p["capturableAmount"] != "10.00" || p["authorizationExpiresAt"] == nil {
				t.Errorf("manual payment: %s, want REQUIRES_CAPTURE with capturableAmount and authorizationExpiresAt", auth.Body)
			}
			capture := auth.Header.Get("Location") + "/capture"
			captured := c.check(specExchange{
				name: "200 partial capture", method: "POST", path: capture, header: servicetest.CreateHeaders(secretA, "c-1"),
				body: `{"amount":"8.00"}`, status: 200, headers: []string{"Location"},
			})
			if p := captured.JSON(t); p["status"] != "SUCCEEDED" || p["capturedAmount"] != "8.00" {
				t.Errorf("capture: %s, want SUCCEEDED with capturedAmount 8.00", captured.Body)
			}
			replay := c.check(specExchange{
				name: "200 capture replayed", method: "POST", path: capture, header: servicetest.CreateHeaders(secretA, "c-1"),
				body: `{"amount":"8.00"}`, status: 200, headers: []string{"Location", "Idempotent-Replayed"}, replayed: true,
			})
			if !bytes.Equal(replay.Body, captured.Body) {
				t.Errorf("the replay is not the original body byte for byte:\n%s\n%s", captured.Body, replay.Body)
			}
			c.check(specExchange{name: "422 capture key reused", method: "POST", path: capture, header: servicetest.CreateHeaders(secretA, "c-1"),
				body: `{"amount":"7.00"}`, status: 422, code: "IDEMPOTENCY_KEY_REUSED"})
			c.check(specExchange{name: "409 captured payment not capturable", method: "POST", path: capture, header: servicetest.CreateHeaders(secretA, "c-2"),
				body: `{}`, status: 409, code: "PAYMENT_NOT_CAPTURABLE"})
			c.check(specExchange{name: "409 captured payment not cancelable", method: "POST", path: auth.Header.Get("Location") + "/cancel",
				header: servicetest.CreateHeaders(secretA, "x-1"), body: `{}`, status: 409, code: "PAYMENT_NOT_CANCELABLE"})
			c.check(specExchange{name: "200 get a captured payment", method: "GET", path: auth.Header.Get("Location"), header: servicetest.Bearer(secretA), status: 200})

			// No body at all (and no Content-Type): the whole amount.
			whole := "/payments/" + c.e.ManualPayment("pm_card_visa", "inv-c2") + "/capture"
			noBody := servicetest.Bearer(secretA)
			noBody["Idempotency-Key"] = "c-3"
			r := c.check(specExchange{name: "200 capture without a body", method: "POST", path: whole, header: noBody,
				status: 200, headers: []string{"Location"}})
			if got := r.JSON(t)["capturedAmount"]; got != "10.00" {
				t.Errorf("capture without a body captured %v, want 10.00", got)
			}

			open := "/payments/" + c.e.ManualPayment("pm_card_visa", "inv-c3") + "/capture"
			textPlain := servicetest.CreateHeaders(secretA, "c-4")
			textPlain["Content-Type"] = "text/plain"
			noKey := servicetest.CreateHeaders(secretA, "")
			delete(noKey, "Idempotency-Key")
			for _, x := range []specExchange{
				{name: "409 capture exceeds", header: servicetest.CreateHeaders(secretA, "c-4"), body: `{"amount":"10.01"}`, status: 409, code: "CAPTURE_EXCEEDS_CAPTURABLE"},
				{name: "400 capture amount invalid", header: servicetest.CreateHeaders(secretA, "c-4"), body: `{"amount":"1.001"}`, status: 400, code: "VALIDATION_FAILED"},
				{name: "400 capture amount not a string", header: servicetest.CreateHeaders(secretA, "c-4"), body: `{"amount":8}`, status: 400, code: "VALIDATION_FAILED", specRejects: "/amount"},
				{name: "400 capture unknown field", header: servicetest.CreateHeaders(secretA, "c-4"), body: `{"extra":"x"}`, status: 400, code: "VALIDATION_FAILED", specRejects: "extra"},
				{name: "400 capture malformed JSON", header: servicetest.CreateHeaders(secretA, "c-4"), body: `{"amount":`, status: 400, code: "MALFORMED_JSON", specRejects: "failed to decode request body"},
				{name: "400 capture key missing", header: noKey, body: `{}`, status: 400, code: "IDEMPOTENCY_KEY_MISSING", specRejects: `"Idempotency-Key" in header`},
				{name: "400 capture key too long", header: servicetest.CreateHeaders(secretA, strings.Repeat("k", 256)), body: `{}`, status: 400, code: "IDEMPOTENCY_KEY_INVALID"},
				{name: "413 capture body too large", header: servicetest.CreateHeaders(secretA, "c-4"), body: `{}` + strings.Repeat(" ", 17<<10), status: 413, code: "PAYLOAD_TOO_LARGE"},
				{name: "415 capture wrong content type", header: textPlain, body: `{}`, status: 415, code: "UNSUPPORTED_MEDIA_TYPE", specRejects: `Content-Type has unexpected value "text/plain"`},
				{name: "401 capture without credentials", header: map[string]string{"Idempotency-Key": "c-4", "Content-Type": "application/json"}, body: `{}`, status: 401, code: "UNAUTHORIZED", specRejects: "security requirements failed"},
			} {
				x.method, x.path = "POST", open
				c.check(x)
			}
			c.check(specExchange{name: "404 capture of an unknown payment", method: "POST", path: "/payments/pay_none/capture", header: servicetest.CreateHeaders(secretA, "c-5"),
				body: `{}`, status: 404, code: "NOT_FOUND"})
			c.check(specExchange{name: "404 capture of another tenant's payment", method: "POST", path: open, header: servicetest.CreateHeaders(secretB, "c-5"),
				body: `{}`, status: 404, code: "NOT_FOUND"})
			automatic := "/payments/" + c.e.Pay("pm_card_visa", "inv-c4") + "/capture"
			c.check(specExchange{name: "409 automatic payment not capturable", method: "POST", path: automatic, header: servicetest.CreateHeaders(secretA, "c-6"),
				body: `{}`, status: 409, code: "PAYMENT_NOT_CAPTURABLE"})

			declines := "/payments/" + c.e.ManualPayment("pm_sim_capture_declined", "inv-c5") + "/capture"
			c.check(specExchange{name: "402 capture declined", method: "POST", path: declines, header: servicetest.CreateHeaders(secretA, "c-7"),
				body: `{}`, status: 402, code: "CAPTURE_DECLINED"})
			c.check(specExchange{name: "402 capture declined replayed", method: "POST", path: declines, header: servicetest.CreateHeaders(secretA, "c-7"),
				body: `{}`, status: 402, code: "CAPTURE_DECLINED", headers: []string{"Idempotent-Replayed"}, replayed: true})
			c.check(specExchange{name: "200 get a payment whose capture was declined", method: "GET", path: strings.TrimSuffix(declines, "/capture"),
				header: servicetest.Bearer(secretA), status: 200})
		}},

		{"cancel", nil, func(t *testing.T, c *conformance) {
			payment := "/payments/" + c.e.ManualPayment("pm_card_visa", "inv-x1")
			canceled := c.check(specExchange{
				name: "200 cancel", method: "POST", path: payment + "/cancel", header: servicetest.CreateHeaders(secretA, "x-1"),
				body: `{"reason":"requested_by_customer"}`, status: 200, headers: []string{"Location"},
			})
			if got := canceled.JSON(t)["status"]; got != "CANCELED" {
				t.Errorf("cancel: status %v, want CANCELED", got)
			}
			c.check(specExchange{name: "200 cancel replayed", method: "POST", path: payment + "/cancel", header: servicetest.CreateHeaders(secretA, "x-1"),
				body: `{"reason":"requested_by_customer"}`, status: 200, headers: []string{"Location", "Idempotent-Replayed"}, replayed: true})
			c.check(specExchange{name: "422 cancel key reused", method: "POST", path: payment + "/cancel", header: servicetest.CreateHeaders(secretA, "x-1"),
				body: `{"reason":"duplicate"}`, status: 422, code: "IDEMPOTENCY_KEY_REUSED"})
			c.check(specExchange{name: "409 canceled payment not cancelable", method: "POST", path: payment + "/cancel", header: servicetest.CreateHeaders(secretA, "x-2"),
				body: `{}`, status: 409, code: "PAYMENT_NOT_CANCELABLE"})
			c.check(specExchange{name: "409 canceled payment not capturable", method: "POST", path: payment + "/capture", header: servicetest.CreateHeaders(secretA, "c-1"),
				body: `{}`, status: 409, code: "PAYMENT_NOT_CAPTURABLE"})
			c.check(specExchange{name: "200 get a canceled payment", method: "GET", path: payment, header: servicetest.Bearer(secretA), status: 200})

			other := "/payments/" + c.e.ManualPayment("pm_card_visa", "inv-x2") + "/cancel"
			noBody := servicetest.Bearer(secretA)
			noBody["Idempotency-Key"] = "x-3"
			noKey := servicetest.CreateHeaders(secretA, "")
			delete(noKey, "Idempotency-Key")
			for _, x := range []specExchange{
				{name: "400 cancel reason invalid", header: servicetest.CreateHeaders(secretA, "x-3"), body: `{"reason":"because"}`, status: 400, code: "VALIDATION_FAILED", specRejects: "/reason"},
				{name: "400 cancel key missing", header: noKey, body: `{}`, status: 400, code: "IDEMPOTENCY_KEY_MISSING", specRejects: `"Idempotency-Key" in header`},
				{name: "400 cancel malformed JSON", header: servicetest.CreateHeaders(secretA, "x-3"), body: `{`, status: 400, code: "MALFORMED_JSON", specRejects: "failed to decode request body"},
				{name: "200 cancel without a body", header: noBody, status: 200, headers: []string{"Location"}},
			} {
				x.method, x.path = "POST", other
				c.check(x)
			}
			c.check(specExchange{name: "404 cancel of an unknown payment", method: "POST", path: "/payments/pay_none/cancel", header: servicetest.CreateHeaders(secretA, "x-4"),
				body: `{}`, status: 404, code: "NOT_FOUND"})
			automatic := "/payments/" + c.e.Pay("pm_card_visa", "inv-x3") + "/cancel"
			c.check(specExchange{name: "409 succeeded payment not cancelable", method: "POST", path: automatic, header: servicetest.CreateHeaders(secretA, "x-5"),
				body: `{}`, status: 409, code: "PAYMENT_NOT_CANCELABLE"})
			// A canceled payment frees its merchant reference.
			c.check(specExchange{name: "201 the canceled payment's reference again", method: "POST", path: "/payments", header: servicetest.CreateHeaders(secretA, "k-again"),
				body: servicetest.Body("merchantReference", `"inv-x1"`), status: 201, headers: []string{"Location"}})
			// A payment refused before processing moved no money: canceled.
			if r := c.e.Post("pay-refused", servicetest.Body("merchantReference", `"inv-x4"`, "paymentMethod", `"pm_sim_unavailable"`)); r.Status != 503 {
				t.Fatalf("refused payment: %d %s", r.Status, r.Body)
			}
			var refused string
			if err := c.e.Pool.QueryRow(t.Context(), `SELECT id FROM payments WHERE merchant_reference = 'inv-x4'`).Scan(&refused); err != nil {
				t.Fatal(err)
			}
			if got := c.check(specExchange{name: "200 cancel of a payment that moved no money", method: "POST", path: "/payments/" + refused + "/cancel",
				header: servicetest.CreateHeaders(secretA, "x-6"), body: `{}`, status: 200, headers: []string{"Location"}}); got.JSON(t)["status"] != "CANCELED" {
				t.Errorf("cancel of a refused payment: %s", got.Body)
			}
		}},

		{"capture and cancel outcomes unknown or refused", []servicetest.Option{servicetest.WithProviderTimeout(300 * time.Millisecond), withActionFaults(faults)}, func(t *testing.T, c *conformance) {
			lost := "/payments/" + c.e.ManualPayment("pm_sim_capture_timeout_after_success", "inv-u1")
			r := c.check(specExchange{name: "202 capture outcome unknown", method: "POST", path: lost + "/capture", header: servicetest.CreateHeaders(secretA, "c-1"),
				body: `{}`, status: 202, headers: []string{"Location", "Retry-After"}})
			if got := r.JSON(t)["status"]; got != "PROCESSING" {
				t.Errorf("202 with status %v, want PROCESSING", got)
			}
			c.check(specExchange{name: "200 get a payment whose capture is in doubt", method: "GET", path: lost, header: servicetest.Bearer(secretA), status: 200})
			c.check(specExchange{name: "409 capture in flight: not capturable", method: "POST", path: lost + "/capture", header: servicetest.CreateHeaders(secretA, "c-2"),
				body: `{}`, status: 409, code: "PAYMENT_NOT_CAPTURABLE"})
			c.check(specExchange{name: "409 capture in flight: not cancelable", method: "POST", path: lost + "/cancel", header: servicetest.CreateHeaders(secretA, "x-1"),
				body: `{}`, status: 409, code: "PAYMENT_NOT_CANCELABLE"})

			voidLost := c.e.ManualPayment("pm_card_visa", "inv-u2")
			faults.loseVoid(voidLost)
			r = c.check(specExchange{name: "202 cancel outcome unknown", method: "POST", path: "/payments/" + voidLost + "/cancel", header: servicetest.CreateHeaders(secretA, "x-2"),
				body: `{}`, status: 202, headers: []string{"Location", "Retry-After"}})
			if got := r.JSON(t)["status"]; got != "PROCESSING" {
				t.Errorf("202 with status %v, want PROCESSING", got)
			}

			refused := c.e.ManualPayment("pm_card_visa", "inv-u3")
			faults.refuseCapture(refused)
			c.check(specExchange{name: "503 capture refused by the provider", method: "POST", path: "/payments/" + refused + "/capture", header: servicetest.CreateHeaders(secretA, "c-3"),
				body: `{}`, status: 503, code: "PROVIDER_UNAVAILABLE", headers: []string{"Retry-After"}})
		}},

		{"capture in flight", []servicetest.Option{withActionFaults(held)}, func(t *testing.T, c *conformance) {
			id := c.e.ManualPayment("pm_card_visa", "inv-f1")
			release := held.holdCapture(id)
			original := specExchange{name: "200 held capture", method: "POST", path: "/payments/" + id + "/capture", header: servicetest.CreateHeaders(secretA, "c-held"),
				body: `{"amount":"5.00"}`, status: 200, headers: []string{"Location"}}
			var answer response
			done := make(chan struct{})
			go func() { defer close(done); answer = c.send(original) }()
			defer func() { release(); <-done }() // never leave the original running past the test
			servicetest.WaitFor(t, func() bool { return c.e.Count("payment_actions WHERE state = 'PROVIDER_REQUEST_SENT'") == 1 })
			inUse := original
			inUse.name, inUse.status, inUse.code, inUse.headers = "409 capture key in use", 409, "IDEMPOTENCY_KEY_IN_USE", []string{"Retry-After"}
			c.check(inUse)
			release()
			<-done
			c.verify(original, answer)
			c.check(specExchange{name: "200 capture replayed after the original finished", method: "POST", path: original.path, header: original.header,
				body: original.body, status: 200, headers: []string{"Location", "Idempotent-Replayed"}, replayed: true})
		}},

		{"capture and cancel keys past their replay window, authorization past its expiry", nil, func(t *testing.T, c *conformance) {
			captured := "/payments/" + c.e.ManualPayment("pm_card_visa", "inv-e1") + "/capture"
			c.check(specExchange{name: "200 capture", method: "POST", path: captured, header: servicetest.CreateHeaders(secretA, "c-old"),
				body: `{}`, status: 200, headers: []string{"Location"}})
			canceled := "/payments/" + c.e.ManualPayment("pm_card_visa", "inv-e2") + "/cancel"
			c.check(specExchange{name: "200 cancel", method: "POST", path: canceled, header: servicetest.CreateHeaders(secretA, "x-old"),
				body: `{}`, status: 200, headers: []string{"Location"}})
			expiring := c.e.Post("k-e3", servicetest.ManualBody("inv-e3", "pm_card_visa"))
			if expiring.Status != http.StatusCreated {
				t.Fatalf("manual payment: %d %s", expiring.Status, expiring.Body)
			}
			c.e.Clock.Advance(c.e.Config.ReplayTTL)
			c.check(specExchange{name: "409 capture key expired", method: "POST", path: captured, header: servicetest.CreateHeaders(secretA, "c-old"),
				body: `{}`, status: 409, code: "IDEMPOTENCY_KEY_EXPIRED"})
			c.check(specExchange{name: "409 cancel key expired", method: "POST", path: canceled, header: servicetest.CreateHeaders(secretA, "x-old"),
				body: `{}`, status: 409, code: "IDEMPOTENCY_KEY_EXPIRED"})

			expiresAt, err := time.Parse(time.RFC3339Nano, expiring.JSON(t)["authorizationExpiresAt"].(string))
			if err != nil {
				t.Fatal(err)
			}
			c.e.Clock.Advance(expiresAt.Sub(c.e.Clock.Now()) + time.Second)
			payment := expiring.Header.Get("Location")
			c.check(specExchange{name: "409 capture after the authorization expired", method: "POST", path: payment + "/capture", header: servicetest.CreateHeaders(secretA, "c-late"),
				body: `{}`, status: 409, code: "AUTHORIZATION_EXPIRED"})
			// A cancel still voids it (the service would have, at the expiry).
			c.check(specExchange{name: "200 cancel after the authorization expired", method: "POST", path: payment + "/cancel", header: servicetest.CreateHeaders(secretA, "x-late"),
				body: `{}`, status: 200, headers: []string{"Location"}})
		}},

		{"original in flight", []servicetest.Option{servicetest.WithSlowDelay(time.Second)}, func(t *testing.T, c *conformance) {
			slow := specExchange{
				name: "201 slow original", method: "POST", path: "/payments", header: servicetest.CreateHeaders(secretA, "k-slow"),
				body: servicetest.Body("paymentMethod", `"pm_sim_slow"`), status: 201, headers: []string{"Location"},
			}
			var original response
			done := make(chan struct{})
			go func() { defer close(done); original = c.send(slow) }()
			defer func() { <-done }() // never leave the original running past the test
			servicetest.WaitFor(t, func() bool { return c.e.Count("payments WHERE state = 'PROVIDER_REQUEST_SENT'") == 1 })
			inUse := slow
			inUse.name, inUse.status, inUse.code, inUse.headers = "409 key in use", 409, "IDEMPOTENCY_KEY_IN_USE", []string{"Retry-After"}
			c.check(inUse)
			<-done
			c.verify(slow, original)
			c.check(specExchange{
				name: "201 replayed after the original finished", method: "POST", path: "/payments", header: servicetest.CreateHeaders(secretA, "k-slow"),
				body: slow.body, status: 201, headers: []string{"Location", "Idempotent-Replayed"}, replayed: true,
			})
		}},

		{"provider unavailable", nil, func(t *testing.T, c *conformance) {
			r := c.check(specExchange{
				name: "503 provider refused", method: "POST", path: "/payments", header: servicetest.CreateHeaders(secretA, "k-down"),
				body: servicetest.Body("paymentMethod", `"pm_sim_unavailable"`), status: 503, code: "PROVIDER_UNAVAILABLE", headers: []string{"Retry-After"},
			})
			if r.Status != 503 {
				return
			}
			got := c.check(specExchange{name: "200 get a failed payment", method: "GET", path: "/payments/" + c.e.OnlyPaymentID(), header: servicetest.Bearer(secretA), status: 200})
			if s := got.JSON(t)["status"]; s != "FAILED" {
				t.Errorf("payment after 503 PROVIDER_UNAVAILABLE: status %v, want FAILED", s)
			}
		}},

		{"key past its replay window", nil, func(t *testing.T, c *conformance) {
			c.check(specExchange{
				name: "201 created", method: "POST", path: "/payments", header: servicetest.CreateHeaders(secretA, "k-old"), body: servicetest.Body(),
				status: 201, headers: []string{"Location"},
			})
			c.e.Clock.Advance(c.e.Config.ReplayTTL)
			c.check(specExchange{
				name: "409 key expired", method: "POST", path: "/payments", header: servicetest.CreateHeaders(secretA, "k-old"), body: servicetest.Body(),
				status: 409, code: "IDEMPOTENCY_KEY_EXPIRED",
			})
		}},

		{"rate limited", []servicetest.Option{servicetest.WithRateLimit(1, 2)}, func(t *testing.T, c *conformance) {
			created := c.check(specExchange{
				name: "201 created", method: "POST", path: "/payments", header: servicetest.CreateHeaders(secretA, "k-1"), body: servicetest.Body(),
				status: 201, headers: []string{"Location"},
			})
			payment := created.Header.Get("Location")
			c.check(specExchange{name: "200 get a payment", method: "GET", path: payment, header: servicetest.Bearer(secretA), status: 200})
			limited := func(name, method, path, body string, header map[string]string) specExchange {
				return specExchange{name: name, method: method, path: path, header: header, body: body,
					status: 429, code: "RATE_LIMITED", headers: []string{"Retry-After"}}
			}
			for _, x := range []specExchange{
				limited("429 create", "POST", "/payments", servicetest.Body("merchantReference", `"inv-2"`), servicetest.CreateHeaders(secretA, "k-2")),
				limited("429 list", "GET", "/payments", "", servicetest.Bearer(secretA)),
				limited("429 get", "GET", payment, "", servicetest.Bearer(secretA)),
				limited("429 refund", "POST", payment+"/refunds", `{"amount":"1.00"}`, servicetest.CreateHeaders(secretA, "r-1")),
				limited("429 list refunds", "GET", payment+"/refunds", "", servicetest.Bearer(secretA)),
				limited("429 get a refund", "GET", payment+"/refunds/re_x", "", servicetest.Bearer(secretA)),
				limited("429 capture", "POST", payment+"/capture", `{}`, servicetest.CreateHeaders(secretA, "c-1")),
				limited("429 cancel", "POST", payment+"/cancel", `{}`, servicetest.CreateHeaders(secretA, "x-1")),
			} {
				c.check(x)
			}
		}},

		{"stripe webhooks", []servicetest.Option{servicetest.WithStripeWebhooks(), servicetest.WithProviderTimeout(300 * time.Millisecond)}, func(t *testing.T, c *conformance) {
			id := c.e.UnknownPayment("k-lost", "inv-1")
			event := servicetest.StripeEvent("evt_1", "payment_intent.succeeded", servicetest.IntentOf(id, "succeeded"))
			signedHeaders := func(payload []byte, secret string, at time.Time) map[string]string {
				return map[string]string{"Content-Type": "application/json", "Stripe-Signature": webhook.GenerateTestSignedPayload(
					&webhook.UnsignedPayload{Payload: payload, Secret: secret, Timestamp: at}).Header}
			}
			now := c.e.Clock.Now()
			c.check(specExchange{name: "400 bad signature", method: "POST", path: "/webhooks/stripe", body: string(event),
				header: signedHeaders(event, "whsec_wrong", now), status: 400, code: "WEBHOOK_SIGNATURE_INVALID"})
			c.check(specExchange{name: "400 stale signature", method: "POST", path: "/webhooks/stripe", body: string(event),
				header: signedHeaders(event, servicetest.StripeWebhookSecret, now.Add(-time.Hour)), status: 400, code: "WEBHOOK_SIGNATURE_INVALID"})
			c.check(specExchange{name: "400 no signature", method: "POST", path: "/webhooks/stripe", body: string(event),
				header: map[string]string{"Content-Type": "application/json"}, status: 400, code: "WEBHOOK_SIGNATURE_INVALID",
				specRejects: "Stripe-Signature"})
			notAnEvent := []byte(`{"object":"customer"}`)
			c.check(specExchange{name: "400 signed, not an event", method: "POST", path: "/webhooks/stripe", body: string(notAnEvent),
				header: signedHeaders(notAnEvent, servicetest.StripeWebhookSecret, now), status: 400, code: "MALFORMED_JSON"})
			c.check(specExchange{name: "200 applied", method: "POST", path: "/webhooks/stripe", body: string(event),
				header: signedHeaders(event, servicetest.StripeWebhookSecret, now), status: 200})
			c.check(specExchange{name: "200 duplicate", method: "POST", path: "/webhooks/stripe", body: string(event),
				header: signedHeaders(event, servicetest.StripeWebhookSecret, now), status: 200})
			other := servicetest.StripeEvent("evt_2", "customer.created", `{"id":"cus_1","object":"customer"}`)
			c.check(specExchange{name: "200 ignored", method: "POST", path: "/webhooks/stripe", body: string(other),
				header: signedHeaders(other, servicetest.StripeWebhookSecret, now), status: 200})
		}},

		{"database unavailable", nil, func(t *testing.T, c *conformance) {
			// The same wiring as TestDatabaseDownIs503: authentication works,
			// the payments store and readiness check see a dead database.
			c.e.URL = c.e.DeadStoreURL(false)
			c.check(specExchange{
				name: "503 create", method: "POST", path: "/payments", header: servicetest.CreateHeaders(secretA, "k"), body: servicetest.Body(),
				status: 503, code: "SERVICE_UNAVAILABLE", headers: []string{"Retry-After"},
			})
			c.check(specExchange{
				name: "503 list", method: "GET", path: "/payments", header: servicetest.Bearer(secretA),
				status: 503, code: "SERVICE_UNAVAILABLE", headers: []string{"Retry-After"},
			})
			c.check(specExchange{
				name: "503 capture", method: "POST", path: "/payments/pay_x/capture", header: servicetest.CreateHeaders(secretA, "c"), body: `{}`,
				status: 503, code: "SERVICE_UNAVAILABLE", headers: []string{"Retry-After"},
			})
			c.check(specExchange{
				name: "503 cancel", method: "POST", path: "/payments/pay_x/cancel", header: servicetest.CreateHeaders(secretA, "x"), body: `{}`,
				status: 503, code: "SERVICE_UNAVAILABLE", headers: []string{"Retry-After"},
			})
			c.check(specExchange{name: "503 readyz", method: "GET", path: "/readyz", status: 503, code: "SERVICE_UNAVAILABLE"})
		}},
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			g.run(t, &conformance{t: t, e: newEnv(t, g.opts...), spec: loadOpenAPISpec(t)})
		})
	}
}

// specExchange is one request and what CONTRACT.md promises for its answer.
type specExchange struct {
	name   string
	method string
	path   string
	header map[string]string
	body   string

	status   int
	code     string   // the problem's code; "" for a success
	headers  []string // headers the contract promises on this answer; the spec must declare them
	replayed bool     // Idempotent-Replayed: true, and only then
	// specRejects: the request breaks a rule the spec states (a missing
	// required header, a body that does not match the schema, ...), so
	// validating it against the spec must fail, with an error that contains
	// this text (it names the rule). Other requests must pass.
	specRejects string
}

// openAPISpec is the router of the parsed OpenAPI document: the operation
// it finds for a request carries the document's schemas.
type openAPISpec struct {
	router routers.Router
}

// loadOpenAPISpec parses and validates api/openapi.yaml as embedded in the binary.
// Every caller gets its own copy: nothing is shared between parallel tests.
func loadOpenAPISpec(t *testing.T) *openAPISpec {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(api.OpenAPI)
	if err != nil {
		t.Fatalf("loading api/openapi.yaml: %v", err)
	}
	if !doc.IsOpenAPI31OrLater() {
		t.Fatalf("api/openapi.yaml declares openapi %q, want 3.1", doc.OpenAPI)
	}
	if err := doc.Validate(loader.Context, openapi3.EnableExamplesValidation()); err != nil {
		t.Fatalf("api/openapi.yaml is not a valid OpenAPI document: %v", err)
	}
	// Hold the server to the members the spec documents: an answer with a
	// member the spec does not name (a renamed or undocumented field) fails.
	// The document leaves its object schemas open so that clients tolerate
	// additions; this copy closes them. Inline schemas (such as the allOf
	// branch of PaymentDeclinedProblem) stay open, as closing one would
	// reject the members its sibling branches define.
	closed := false
	for _, s := range doc.Components.Schemas {
		if v := s.Value; v != nil && v.Type.Is(openapi3.TypeObject) && len(v.Properties) > 0 &&
			v.AdditionalProperties.Has == nil && v.AdditionalProperties.Schema == nil {
			v.AdditionalProperties.Has = &closed
		}
	}
	// The declared server is the dev one on localhost:8080; the test server
	// listens elsewhere. Match routes by path alone.
	doc.Servers = nil
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	return &openAPISpec{router: router}
}

// conformance sends exchanges to one environment and checks them.
type conformance struct {
	t    *testing.T
	e    *env
	spec *openAPISpec
}

// check sends x and verifies the exchange; it returns the answer.
func (c *conformance) check(x specExchange) response {
	c.t.Helper()
	r := c.send(x)
	c.verify(x, r)
	return r
}

// send only sends x: it may run on another goroutine.
func (c *conformance) send(x specExchange) response {
	return c.e.Do(x.method, x.path, []byte(x.body), x.header)
}

// verify checks the request and the answer of x against the spec, and the
// answer against the contract's promises in x.
func (c *conformance) verify(x specExchange, r response) {
	t := c.t
	t.Helper()
	ctx := context.Background()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Errorf("%s: %s %s: %s\nanswer: %d %v\n%.2000s", x.name, x.method, x.path, fmt.Sprintf(format, args...), r.Status, r.Header, r.Body)
	}

	req, err := http.NewRequest(x.method, c.e.URL+x.path, bytes.NewReader([]byte(x.body)))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range x.header {
		req.Header.Set(k, v)
	}
	route, pathParams, err := c.spec.router.FindRoute(req)
	if err != nil {
		fail("the spec documents no such operation: %v", err)
		return
	}
	in := &openapi3filter.RequestValidationInput{
		Request: req, PathParams: pathParams, Route: route,
		Options: &openapi3filter.Options{
			MultiError: true,
			// The spec can say a servicetest.Bearer secret is required, not which
			// secrets exist: check that one is sent, as a client would.
			AuthenticationFunc: func(_ context.Context, in *openapi3filter.AuthenticationInput) error {
				scheme, secret, _ := strings.Cut(in.RequestValidationInput.Request.Header.Get("Authorization"), " ")
				if in.SecurityScheme.Type != "http" || !strings.EqualFold(scheme, in.SecurityScheme.Scheme) || secret == "" {
					return errors.New("no servicetest.Bearer secret")
				}
				return nil
			},
		},
	}
	reqErr := openapi3filter.ValidateRequest(ctx, in)
	switch {
	case x.specRejects != "" && reqErr == nil:
		fail("the request breaks the contract, but the spec accepts it: the spec does not document the rule (%s)", x.specRejects)
	case x.specRejects != "" && !strings.Contains(reqErr.Error(), x.specRejects):
		fail("the spec rejects the request, but not for %s: %v", x.specRejects, reqErr)
	case x.specRejects == "" && reqErr != nil:
		fail("the request does not conform to the spec: %v", reqErr)
	}

	// The answer against the spec: documented status, media type, body
	// schema, declared headers.
	if err := openapi3filter.ValidateResponse(ctx, &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 r.Status,
		Header:                 r.Header,
		Body:                   io.NopCloser(bytes.NewReader(r.Body)),
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}); err != nil {
		fail("the answer does not conform to the spec: %v", err)
	}

	// The answer against the contract.
	if r.Status != x.status {
		fail("status %d, want %d", r.Status, x.status)
		return
	}
	documented := route.Operation.Responses.Status(r.Status)
	for _, h := range x.headers {
		if r.Header.Get(h) == "" {
			fail("no %s header", h)
		}
		if documented == nil || documented.Value == nil || documented.Value.Headers[h] == nil {
			fail("the spec does not declare the %s header of this answer", h)
		}
	}
	// Every error answer says whether to retry it, as the spec declares.
	if r.Status >= 400 {
		want := strconv.FormatBool(!x.replayed && (r.Status >= 500 || r.Status == http.StatusTooManyRequests ||
			x.code == "IDEMPOTENCY_KEY_IN_USE"))
		if got := r.Header.Get("Payments-Should-Retry"); got != want {
			fail("Payments-Should-Retry: %q, want %q", got, want)
		}
		if documented == nil || documented.Value == nil || documented.Value.Headers["Payments-Should-Retry"] == nil {
			fail("the spec does not declare the Payments-Should-Retry header of this answer")
		}
	}
	if got := r.Header.Get("Idempotent-Replayed"); (got == "true") != x.replayed {
		fail("Idempotent-Replayed: %q, want replayed=%v", got, x.replayed)
	}
	ct := r.Header.Get("Content-Type")
	if x.code == "" {
		return
	}
	if ct != "application/problem+json" {
		fail("a problem served as %q", ct)
	}
	var p struct {
		Type, Title, Detail, Code           string
		Status                              int
		PaymentID, DeclineCode              string
		RefundID, CaptureID, CancellationID string
		CapturableAmount, RefundableAmount  string
		Errors                              []json.RawMessage
	}
	if err := json.Unmarshal(r.Body, &p); err != nil {
		fail("problem body: %v", err)
		return
	}
	if p.Code != x.code || p.Status != r.Status || p.Type == "" || p.Title == "" || p.Detail == "" {
		fail("want code %s with type, title, detail and status %d", x.code, r.Status)
	}
	// The members the contract adds to some codes.
	switch p.Code {
	case "PAYMENT_DECLINED", "CAPTURE_DECLINED":
		if p.PaymentID == "" || p.DeclineCode == "" {
			fail("%s without paymentId and declineCode", p.Code)
		}
	case "IDEMPOTENCY_KEY_EXPIRED":
		// The resource the key created: a payment, or the operation's own.
		member, id := "paymentId", p.PaymentID
		switch op := x.path[strings.LastIndex(x.path, "/")+1:]; {
		case op == "capture":
			member, id = "captureId", p.CaptureID
		case op == "cancel":
			member, id = "cancellationId", p.CancellationID
		case op == "refunds":
			member, id = "refundId", p.RefundID
		}
		if id == "" {
			fail("%s without %s", p.Code, member)
		}
	case "DUPLICATE_MERCHANT_REFERENCE":
		if p.PaymentID == "" {
			fail("%s without paymentId", p.Code)
		}
	case "CAPTURE_EXCEEDS_CAPTURABLE":
		if p.CapturableAmount == "" {
			fail("%s without capturableAmount", p.Code)
		}
	case "REFUND_EXCEEDS_REFUNDABLE":
		if p.RefundableAmount == "" {
			fail("%s without refundableAmount", p.Code)
		}
	case "VALIDATION_FAILED":
		if len(p.Errors) == 0 {
			fail("%s without errors", p.Code)
		}
	}
}

// actionFaults is the provider with faults in the captures and voids of
// the payments it is told: a void whose answer is lost after the provider
// voided, a capture the provider refuses before processing, a capture held
// until released.
type actionFaults struct {
	provider.Provider
	mu           sync.Mutex
	lostVoids    map[string]bool
	refused      map[string]bool
	heldCaptures map[string]chan struct{}
}

// withActionFaults puts f between the service and the simulator.
func withActionFaults(f *actionFaults) servicetest.Option {
	return servicetest.WithProvider(func(p provider.Provider) provider.Provider { f.Provider = p; return f })
}

func (f *actionFaults) loseVoid(paymentID string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lostVoids == nil {
		f.lostVoids = map[string]bool{}
	}
	f.lostVoids[paymentID] = true
}

func (f *actionFaults) refuseCapture(paymentID string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.refused == nil {
		f.refused = map[string]bool{}
	}
	f.refused[paymentID] = true
}

// holdCapture holds the captures of the payment until release is called
// (once or more).
func (f *actionFaults) holdCapture(paymentID string) (release func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.heldCaptures == nil {
		f.heldCaptures = map[string]chan struct{}{}
	}
	ch := make(chan struct{})
	f.heldCaptures[paymentID] = ch
	var once sync.Once
	return func() { once.Do(func() { close(ch) }) }
}

func (f *actionFaults) Capture(ctx context.Context, req provider.CaptureRequest) (provider.Charge, error) {
	f.mu.Lock()
	refused, held := f.refused[req.PaymentID], f.heldCaptures[req.PaymentID]
	f.mu.Unlock()
	if refused {
		return provider.Charge{}, fmt.Errorf("injected: %w", provider.ErrUnavailable)
	}
	if held != nil {
		select {
		case <-held:
		case <-ctx.Done():
			return provider.Charge{}, fmt.Errorf("held: %w", provider.ErrUnknownOutcome)
		}
	}
	return f.Provider.Capture(ctx, req)
}

func (f *actionFaults) Void(ctx context.Context, req provider.VoidRequest) (provider.Charge, error) {
	f.mu.Lock()
	lost := f.lostVoids[req.PaymentID]
	f.mu.Unlock()
	ch, err := f.Provider.Void(ctx, req)
	if err == nil && lost {
		return provider.Charge{}, fmt.Errorf("injected, after the provider voided: %w", provider.ErrUnknownOutcome)
	}
	return ch, err
}
