package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/stripe/stripe-go/v76/webhook"

	"github.com/paymentsapi/paymentsapi/internal/payments"
	"github.com/paymentsapi/paymentsapi/internal/provider/stripeprovider"
	"github.com/paymentsapi/paymentsapi/internal/refunds"
)

// stripeWebhook sends one signed Stripe event to the API at baseURL.
func stripeWebhook(ctx context.Context, baseURL string, getenv func(string) string, args []string, out *output) int {
	fs := subcommandFlags("stripe-webhook")
	typ := fs.String("type", "", "the event type")
	secret := fs.String("secret", getenv("STRIPE_WEBHOOK_SECRET"), "the webhook endpoint's signing secret")
	objectID := fs.String("object", "", "the Stripe object's id")
	id, err := parseWithID(fs, args, "payment or refund id")
	if err != nil {
		return out.usage(err)
	}
	if *secret == "" {
		return out.usage(fmt.Errorf("stripe-webhook needs -secret or $STRIPE_WEBHOOK_SECRET (the server's STRIPE_WEBHOOK_SECRET)"))
	}
	event, err := stripeEvent(id, *typ, *objectID, time.Now())
	if err != nil {
		return out.usage(err)
	}
	signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: event, Secret: *secret, Timestamp: time.Now()})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(baseURL, "/")+"/webhooks/stripe", bytes.NewReader(signed.Payload))
	if err != nil {
		out.errorf("%v", err)
		return exitError
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Stripe-Signature", signed.Header)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		out.errorf("send the event: %v", err)
		return exitError
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		hint := ""
		if resp.StatusCode == http.StatusNotFound {
			hint = " (the server has no STRIPE_WEBHOOK_SECRET: the route does not exist)"
		}
		out.errorf("POST /webhooks/stripe: %s%s: %s", resp.Status, hint, bytes.TrimSpace(body))
		return exitError
	}
	var answer any
	if err := json.Unmarshal(body, &answer); err != nil {
		out.errorf("POST /webhooks/stripe answered %s", body)
		return exitError
	}
	return out.resource(answer)
}

// stripeEvent is the JSON of a Stripe event of type typ (a default by the
// resource when empty) whose object names our resource id in its metadata
// and by its idempotency key, as the Stripe adapter creates them.
func stripeEvent(id, typ, objectID string, now time.Time) ([]byte, error) {
	var object map[string]any
	switch {
	case strings.HasPrefix(id, "pay_"):
		typ = firstOf(typ, "payment_intent.succeeded")
		object = map[string]any{"id": firstOf(objectID, "pi_paymentsctl"), "object": "payment_intent",
			"metadata": map[string]string{stripeprovider.MetadataPaymentID: id, stripeprovider.MetadataIdempotencyKey: payments.ProviderKey(id)}}
	case strings.HasPrefix(id, "re_"):
		typ = firstOf(typ, "refund.updated")
		object = map[string]any{"id": firstOf(objectID, "re_paymentsctl"), "object": "refund",
			"metadata": map[string]string{stripeprovider.MetadataRefundID: id, stripeprovider.MetadataIdempotencyKey: refunds.ProviderKey(id)}}
	default:
		return nil, fmt.Errorf("stripe-webhook: %q is neither a payment (pay_...) nor a refund (re_...)", id)
	}
	return json.Marshal(map[string]any{
		"id": fmt.Sprintf("evt_paymentsctl_%d", now.UnixNano()), "object": "event", "type": typ,
		"created": now.Unix(), "api_version": "2023-10-16", "livemode": false,
		"data": map[string]any{"object": object},
	})
}
