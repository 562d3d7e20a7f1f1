package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	stripe "github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/webhook"
)

// stripe-webhook sends an event Stripe's own library verifies with the
// secret, about the resource named, as the Stripe adapter's objects name
// it (metadata and key); a wrong secret is the server's 400 and exit 1
// (the documented way to send a signed Stripe webhook locally).
func TestStripeWebhookSendsASignedEvent(t *testing.T) {
	t.Parallel()
	const secret = "whsec_test_paymentsctl"
	var got []stripe.Event
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		e, err := webhook.ConstructEvent(body, r.Header.Get("Stripe-Signature"), secret)
		if r.URL.Path != "/webhooks/stripe" || err != nil {
			http.Error(w, `{"code":"WEBHOOK_SIGNATURE_INVALID"}`, http.StatusBadRequest)
			return
		}
		got = append(got, e)
		_ = json.NewEncoder(w).Encode(map[string]string{"eventId": e.ID, "outcome": "applied"})
	}))
	t.Cleanup(srv.Close)
	env := map[string]string{"STRIPE_WEBHOOK_SECRET": secret}

	ctl(context.Background(), env, "-url", srv.URL, "stripe-webhook", "pay_1").want(t, exitOK)
	ctl(context.Background(), env, "-url", srv.URL, "stripe-webhook", "re_1", "-type", "refund.created").want(t, exitOK)
	ctl(context.Background(), env, "-url", srv.URL, "stripe-webhook", "pay_1", "-secret", "whsec_wrong").want(t, exitError)
	ctl(context.Background(), env, "-url", srv.URL, "stripe-webhook", "cus_1").want(t, exitError)

	if len(got) != 2 {
		t.Fatalf("%d events verified, want 2", len(got))
	}
	for i, want := range []struct{ typ, object, key, id string }{
		{"payment_intent.succeeded", "payment_intent", "payment_id", "pay_1"},
		{"refund.created", "refund", "refund_id", "re_1"},
	} {
		var obj struct {
			Object   string            `json:"object"`
			Metadata map[string]string `json:"metadata"`
		}
		if err := json.Unmarshal(got[i].Data.Raw, &obj); err != nil {
			t.Fatal(err)
		}
		if string(got[i].Type) != want.typ || obj.Object != want.object || obj.Metadata[want.key] != want.id ||
			obj.Metadata["idempotency_key"] != "paymentsapi:"+want.id {
			t.Errorf("event %d: %s %+v, want %+v", i, got[i].Type, obj, want)
		}
	}
}
