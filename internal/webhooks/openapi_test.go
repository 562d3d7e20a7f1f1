package webhooks_test

import (
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/servicetest"
	"github.com/stripe/stripe-go/v76/webhook"
)

// Every answer of POST /webhooks/stripe is the one the spec documents and
// CONTRACT.md promises (servicetest.CheckSpec).
func TestStripeWebhookAnswersConformToTheOpenAPISpec(t *testing.T) {
	t.Parallel()
	servicetest.CheckSpec(t,
		servicetest.SpecGroup{Name: "stripe webhooks", Options: []servicetest.Option{servicetest.WithStripeWebhooks(), servicetest.WithProviderTimeout(300 * time.Millisecond)}, Run: func(t *testing.T, c *servicetest.Conformance) {
			id := c.E.UnknownPayment("k-lost", "inv-1")
			event := servicetest.StripeEvent("evt_1", "payment_intent.succeeded", servicetest.IntentOf(id, "succeeded"))
			signedHeaders := func(payload []byte, secret string, at time.Time) map[string]string {
				return map[string]string{"Content-Type": "application/json", "Stripe-Signature": webhook.GenerateTestSignedPayload(
					&webhook.UnsignedPayload{Payload: payload, Secret: secret, Timestamp: at}).Header}
			}
			now := c.E.Clock.Now()
			c.Check(servicetest.Exchange{Name: "400 bad signature", Method: "POST", Path: "/webhooks/stripe", Body: string(event),
				Header: signedHeaders(event, "whsec_wrong", now), Status: 400, Code: "WEBHOOK_SIGNATURE_INVALID"})
			c.Check(servicetest.Exchange{Name: "400 stale signature", Method: "POST", Path: "/webhooks/stripe", Body: string(event),
				Header: signedHeaders(event, servicetest.StripeWebhookSecret, now.Add(-time.Hour)), Status: 400, Code: "WEBHOOK_SIGNATURE_INVALID"})
			c.Check(servicetest.Exchange{Name: "400 no signature", Method: "POST", Path: "/webhooks/stripe", Body: string(event),
				Header: map[string]string{"Content-Type": "application/json"}, Status: 400, Code: "WEBHOOK_SIGNATURE_INVALID",
				SpecRejects: "Stripe-Signature"})
			notAnEvent := []byte(`{"object":"customer"}`)
			c.Check(servicetest.Exchange{Name: "400 signed, not an event", Method: "POST", Path: "/webhooks/stripe", Body: string(notAnEvent),
				Header: signedHeaders(notAnEvent, servicetest.StripeWebhookSecret, now), Status: 400, Code: "MALFORMED_JSON"})
			c.Check(servicetest.Exchange{Name: "200 applied", Method: "POST", Path: "/webhooks/stripe", Body: string(event),
				Header: signedHeaders(event, servicetest.StripeWebhookSecret, now), Status: 200})
			c.Check(servicetest.Exchange{Name: "200 duplicate", Method: "POST", Path: "/webhooks/stripe", Body: string(event),
				Header: signedHeaders(event, servicetest.StripeWebhookSecret, now), Status: 200})
			other := servicetest.StripeEvent("evt_2", "customer.created", `{"id":"cus_1","object":"customer"}`)
			c.Check(servicetest.Exchange{Name: "200 ignored", Method: "POST", Path: "/webhooks/stripe", Body: string(other),
				Header: signedHeaders(other, servicetest.StripeWebhookSecret, now), Status: 200})
		}},
	)
}
