package servicetest

import (
	"fmt"
	"net/http"
	"time"

	"github.com/stripe/stripe-go/v76/webhook"

	"github.com/paymentsapi/paymentsapi/internal/payments"
	"github.com/paymentsapi/paymentsapi/internal/provider/sim"
)

// StripeWebhookSecret signs the Stripe events of WithStripeWebhooks.
const StripeWebhookSecret = "whsec_test_paymentsapi"

// WithStripeWebhooks enables POST /webhooks/stripe with StripeWebhookSecret.
func WithStripeWebhooks() Option {
	return func(o *Options) { o.Config.StripeWebhookSecret = StripeWebhookSecret }
}

// StripeEvent is a Stripe event of type typ about object (JSON).
func StripeEvent(id, typ, object string) []byte {
	return fmt.Appendf(nil, `{"id":%q,"object":"event","api_version":"2023-10-16","created":1795000000,"livemode":false,`+
		`"type":%q,"data":{"object":%s}}`, id, typ, object)
}

// IntentOf is a PaymentIntent as our Stripe adapter creates it for
// paymentID, saying status: what an event claims, never what is booked.
func IntentOf(paymentID, status string) string {
	return fmt.Sprintf(`{"id":"pi_3Test","object":"payment_intent","amount":1000,"currency":"eur","status":%q,`+
		`"metadata":{"idempotency_key":%q,"payment_id":%q}}`, status, payments.ProviderKey(paymentID), paymentID)
}

// Webhook delivers payload as Stripe would, signed with secret at at.
func (e *Env) Webhook(payload []byte, secret string, at time.Time) Response {
	e.T.Helper()
	header := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payload, Secret: secret, Timestamp: at}).Header
	return e.Do("POST", "/webhooks/stripe", payload, map[string]string{"Content-Type": "application/json", "Stripe-Signature": header})
}

// UnknownPayment creates a payment whose provider answer was lost after
// the charge succeeded: 202, UNKNOWN_REQUIRES_RECOVERY, key released.
func (e *Env) UnknownPayment(key, ref string) string {
	e.T.Helper()
	r := e.Post(key, Body("merchantReference", `"`+ref+`"`, "paymentMethod", `"`+sim.MethodTimeoutAfterSuccess+`"`))
	if r.Status != http.StatusAccepted {
		e.T.Fatalf("lost answer: %d %s", r.Status, r.Body)
	}
	id := r.JSON(e.T)["paymentId"].(string)
	if s := e.PaymentState(id); s != payments.StateUnknown {
		e.T.Fatalf("payment %s", s)
	}
	return id
}

// Lookups is how many lookups reached the payment's charge at the simulator.
func (e *Env) Lookups(paymentID string) int {
	n := 0
	for _, c := range e.ChargesFor(paymentID) {
		n += c.LookupCount
	}
	return n
}
