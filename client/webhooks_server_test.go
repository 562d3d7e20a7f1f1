package client_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/client"
	"github.com/paymentsapi/paymentsapi/internal/apitest"
	"github.com/paymentsapi/paymentsapi/internal/outbound"
)

// The tests in this file run the webhook endpoint and event calls against
// the real API, in-process (see package apitest). apitest runs no relay and
// no delivery worker, so the event log stays empty here: delivery itself is
// internal/delivery's to test.

func TestServerWebhookEndpointLifecycle(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{Webhooks: outbound.Policy{AllowHTTP: true, AllowPrivate: true}})
	c, rec := serverClient(t, s.URL, s.Secret)
	ctx := context.Background()

	req := client.CreateWebhookEndpointRequest{
		URL:         "http://127.0.0.1:9/hooks",
		EventTypes:  []client.EventType{client.EventRefundSucceeded, client.EventPaymentSucceeded},
		Description: "orders",
	}
	res, err := c.CreateWebhookEndpoint(ctx, req, client.WithIdempotencyKey("hook-1"))
	if err != nil {
		t.Fatal(err)
	}
	e := res.Endpoint
	if res.StatusCode != 201 || res.Replayed || res.Attempts != 1 || !strings.HasPrefix(e.EndpointID, "we_") ||
		!strings.HasPrefix(e.Secret, "whsec_") || e.Status != client.WebhookEndpointEnabled || e.URL != req.URL ||
		e.Description != "orders" || len(e.EventTypes) != 2 {
		t.Fatalf("registration: %+v %+v", res.Outcome, e)
	}
	if res.Location != "/webhook-endpoints/"+e.EndpointID {
		t.Errorf("Location %q", res.Location)
	}
	// The secret verifies what the service signs with it.
	header, err := outbound.Sign("evt-1", time.Now(), []byte(`{}`), e.Secret)
	if err != nil {
		t.Errorf("the answered secret does not sign: %v", err)
	} else if err := outbound.Verify(e.Secret, header, []byte(`{}`)); err != nil {
		t.Errorf("the answered secret does not verify: %v", err)
	}

	// The same command under the same key: the stored answer, the same
	// secret, no second endpoint. The types in another order are the
	// same command.
	req.EventTypes = []client.EventType{client.EventPaymentSucceeded, client.EventRefundSucceeded}
	again, err := c.CreateWebhookEndpoint(ctx, req, client.WithIdempotencyKey("hook-1"))
	if err != nil {
		t.Fatal(err)
	}
	if !again.Replayed || again.Endpoint.EndpointID != e.EndpointID || again.Endpoint.Secret != e.Secret {
		t.Errorf("the same registration again: %+v, want the replayed answer", again)
	}
	other := req
	other.URL = "http://127.0.0.1:9/other"
	_, err = c.CreateWebhookEndpoint(ctx, other, client.WithIdempotencyKey("hook-1"))
	wantProblem(t, err, 422, client.CodeIdempotencyKeyReused)
	_, err = c.CreateWebhookEndpoint(ctx, client.CreateWebhookEndpointRequest{URL: "http://127.0.0.1:9/", EventTypes: []client.EventType{"payment.refunded"}})
	if p := wantProblem(t, err, 400, client.CodeValidationFailed); len(p.Errors) == 0 || p.Errors[0].Field != "eventTypes" {
		t.Errorf("errors %+v, want eventTypes", p.Errors)
	}

	wantOnlyEndpoint(t, c, e.EndpointID, req)

	rotated, err := c.RotateWebhookSecret(ctx, e.EndpointID, client.WithIdempotencyKey("rotate-1"))
	if err != nil {
		t.Fatal(err)
	}
	if rotated.StatusCode != 200 || rotated.Endpoint.EndpointID != e.EndpointID || !strings.HasPrefix(rotated.Endpoint.Secret, "whsec_") ||
		rotated.Endpoint.Secret == e.Secret {
		t.Errorf("rotation: %+v %+v, want a new secret", rotated.Outcome, rotated.Endpoint)
	}
	replayed, err := c.RotateWebhookSecret(ctx, e.EndpointID, client.WithIdempotencyKey("rotate-1"))
	if err != nil {
		t.Fatal(err)
	}
	if !replayed.Replayed || replayed.Endpoint.Secret != rotated.Endpoint.Secret {
		t.Errorf("the same rotation again: %+v, want the same new secret, replayed", replayed)
	}
	_, err = c.RotateWebhookSecret(ctx, "we_unknown")
	wantProblem(t, err, 404, client.CodeNotFound)

	if err := c.DeleteWebhookEndpoint(ctx, e.EndpointID); err != nil {
		t.Fatal(err)
	}
	_, err = c.GetWebhookEndpoint(ctx, e.EndpointID)
	wantProblem(t, err, 404, client.CodeNotFound)
	err = c.DeleteWebhookEndpoint(ctx, e.EndpointID)
	wantProblem(t, err, 404, client.CodeNotFound)
	if list, err := c.ListWebhookEndpoints(ctx); err != nil || len(list.Items) != 0 {
		t.Errorf("endpoints after the delete: %+v (%v), want none", list, err)
	}

	// The event log's calls, on an empty log.
	events, err := c.ListEvents(ctx, client.ListEventsParams{Type: client.EventPaymentSucceeded, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(events.Items) != 0 || events.NextCursor != "" {
		t.Errorf("events %+v, want none", events)
	}
	const unknownEvent = "019ac0b2-7f3e-7c1a-9d2b-5e4f3a2b1c0d"
	_, err = c.GetEvent(ctx, unknownEvent)
	wantProblem(t, err, 404, client.CodeNotFound)
	_, err = c.ListEventDeliveries(ctx, unknownEvent)
	wantProblem(t, err, 404, client.CodeNotFound)
	_, err = c.ResendEvent(ctx, unknownEvent, client.ResendEventRequest{})
	wantProblem(t, err, 404, client.CodeNotFound)

	// Every refusal above was final: no call was made twice.
	for _, x := range rec.exchanges() {
		if x.status == 0 || x.status >= 500 {
			t.Errorf("exchange %+v", x)
		}
	}
}

func TestServerWebhookURLForbiddenByDefault(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{}) // production's policy: https, public addresses
	c, rec := serverClient(t, s.URL, s.Secret)
	for _, url := range []string{"http://127.0.0.1:9/hooks", "https://127.0.0.1:9/hooks", "https://[::1]/hooks", "https://10.0.0.5/hooks", "https://169.254.169.254/latest"} {
		_, err := c.CreateWebhookEndpoint(context.Background(), client.CreateWebhookEndpointRequest{URL: url})
		wantProblem(t, err, 400, client.CodeWebhookURLForbidden)
	}
	if n := len(rec.exchanges()); n != 5 {
		t.Errorf("%d requests, want 5: a 400 is final", n)
	}
	if list, err := c.ListWebhookEndpoints(context.Background()); err != nil || len(list.Items) != 0 {
		t.Errorf("endpoints %+v (%v), want none registered", list, err)
	}
}
