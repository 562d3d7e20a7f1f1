package refunds_test

import (
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/servicetest"
)

// Every answer of POST /payments/{id}/refunds and of the refunds' reads is
// the one the spec documents and CONTRACT.md promises
// (servicetest.CheckSpec).
func TestRefundAnswersConformToTheOpenAPISpec(t *testing.T) {
	t.Parallel()
	servicetest.CheckSpec(t,
		servicetest.SpecGroup{Name: "refunds", Options: []servicetest.Option{servicetest.WithProviderTimeout(300 * time.Millisecond)}, Run: func(t *testing.T, c *servicetest.Conformance) {
			pay := c.E.Pay("pm_card_visa", "inv-r")
			refunds := "/payments/" + pay + "/refunds"
			created := c.Check(servicetest.Exchange{
				Name: "201 refund", Method: "POST", Path: refunds, Header: servicetest.CreateHeaders(servicetest.SecretA, "r-1"),
				Body: `{"amount":"3.00","reason":"requested_by_customer"}`, Status: 201, Headers: []string{"Location"},
			})
			c.Check(servicetest.Exchange{
				Name: "201 refund replayed", Method: "POST", Path: refunds, Header: servicetest.CreateHeaders(servicetest.SecretA, "r-1"),
				Body: `{"amount":"3.00","reason":"requested_by_customer"}`, Status: 201, Headers: []string{"Location", "Idempotent-Replayed"}, Replayed: true,
			})
			c.Check(servicetest.Exchange{Name: "422 refund key reused", Method: "POST", Path: refunds, Header: servicetest.CreateHeaders(servicetest.SecretA, "r-1"),
				Body: `{"amount":"4.00"}`, Status: 422, Code: "IDEMPOTENCY_KEY_REUSED"})
			c.Check(servicetest.Exchange{Name: "409 refund exceeds", Method: "POST", Path: refunds, Header: servicetest.CreateHeaders(servicetest.SecretA, "r-2"),
				Body: `{"amount":"7.01"}`, Status: 409, Code: "REFUND_EXCEEDS_REFUNDABLE", Members: []string{"refundableAmount"}})
			c.Check(servicetest.Exchange{Name: "404 refund of an unknown payment", Method: "POST", Path: "/payments/pay_none/refunds", Header: servicetest.CreateHeaders(servicetest.SecretA, "r-3"),
				Body: `{"amount":"1.00"}`, Status: 404, Code: "NOT_FOUND"})
			c.Check(servicetest.Exchange{Name: "400 refund without a key", Method: "POST", Path: refunds, Header: servicetest.Bearer(servicetest.SecretA),
				Body: `{"amount":"1.00"}`, Status: 400, Code: "IDEMPOTENCY_KEY_MISSING", SpecRejects: "Idempotency-Key"})
			c.Check(servicetest.Exchange{Name: "200 list refunds", Method: "GET", Path: refunds, Header: servicetest.Bearer(servicetest.SecretA), Status: 200})
			c.Check(servicetest.Exchange{Name: "200 get a refund", Method: "GET", Path: created.Header.Get("Location"), Header: servicetest.Bearer(servicetest.SecretA), Status: 200})
			c.Check(servicetest.Exchange{Name: "200 payment with refundedAmount", Method: "GET", Path: "/payments/" + pay, Header: servicetest.Bearer(servicetest.SecretA), Status: 200})

			declined := c.E.Pay("pm_sim_refund_declined", "inv-rd")
			c.Check(servicetest.Exchange{Name: "402 refund declined", Method: "POST", Path: "/payments/" + declined + "/refunds", Header: servicetest.CreateHeaders(servicetest.SecretA, "r-4"),
				Body: `{"amount":"1.00"}`, Status: 402, Code: "REFUND_DECLINED"})
			lost := c.E.Pay("pm_sim_refund_timeout_after_success", "inv-rl")
			c.Check(servicetest.Exchange{Name: "202 refund outcome unknown", Method: "POST", Path: "/payments/" + lost + "/refunds", Header: servicetest.CreateHeaders(servicetest.SecretA, "r-5"),
				Body: `{"amount":"1.00"}`, Status: 202})
			notPaid := c.E.Post("k-np", servicetest.Body("merchantReference", `"inv-np"`, "paymentMethod", `"pm_card_chargeDeclined"`)).JSON(t)["paymentId"].(string)
			c.Check(servicetest.Exchange{Name: "409 payment not refundable", Method: "POST", Path: "/payments/" + notPaid + "/refunds", Header: servicetest.CreateHeaders(servicetest.SecretA, "r-6"),
				Body: `{"amount":"1.00"}`, Status: 409, Code: "PAYMENT_NOT_REFUNDABLE"})
		}},
	)
}
