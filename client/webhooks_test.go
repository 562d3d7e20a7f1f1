package client_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/paymentsapi/paymentsapi/client"
)

// The tests in this file run the webhook endpoint and event calls against
// the fake API, whose every answer is checked against api/openapi.yaml.

// wantOnlyEndpoint fails t unless the tenant's one endpoint, listed and
// read, is id, enabled, registered with req's URL and types (without its
// secret: the types have none).
func wantOnlyEndpoint(t *testing.T, c *client.Client, id string, req client.CreateWebhookEndpointRequest) {
	t.Helper()
	ctx := context.Background()
	list, err := c.ListWebhookEndpoints(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].EndpointID != id {
		t.Fatalf("endpoints %+v, want exactly %s", list.Items, id)
	}
	got, err := c.GetWebhookEndpoint(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if got.EndpointID != id || got.URL != req.URL || got.Status != client.WebhookEndpointEnabled || len(got.EventTypes) != len(req.EventTypes) {
		t.Errorf("GetWebhookEndpoint: %+v, want %s enabled with %+v", got, id, req)
	}
}

// fakeClientWithSecret is fakeClient with another API key.
func fakeClientWithSecret(t *testing.T, f *fakeAPI, secret string) *client.Client {
	t.Helper()
	c, err := client.New(client.Config{BaseURL: f.URL, APIKey: secret, Clock: newFakeClock(), Rand: func() float64 { return 0 }})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestWebhookEndpointLifecycle(t *testing.T) {
	t.Parallel()
	f := newFakeAPI(t)
	c := fakeClient(t, f)
	ctx := context.Background()

	// Registered once, however often the answer is lost: the retry gets
	// the stored answer, which holds no secret, and the client reads the
	// secret with GET /webhook-endpoints/{endpointId}/secret.
	req := client.CreateWebhookEndpointRequest{
		URL:        "https://merchant.example/hooks",
		EventTypes: []client.EventType{client.EventPaymentSucceeded, client.EventRefundSucceeded},
	}
	f.drop(1)
	res, err := c.CreateWebhookEndpoint(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	e := res.Endpoint
	if res.StatusCode != 201 || !res.Replayed || res.Attempts != 2 {
		t.Errorf("outcome %+v, want the replayed 201 on the second attempt", res.Outcome)
	}
	if !strings.HasPrefix(e.EndpointID, "we_") || !strings.HasPrefix(e.Secret, "whsec_") || e.Status != client.WebhookEndpointEnabled ||
		e.URL != req.URL || len(e.EventTypes) != 2 {
		t.Fatalf("endpoint %+v", e)
	}
	if res.Location != "/webhook-endpoints/"+e.EndpointID {
		t.Errorf("Location %q", res.Location)
	}
	if keys := f.keys(); len(keys) != 3 || keys[0] != res.IdempotencyKey || keys[1] != res.IdempotencyKey || keys[2] != "" {
		t.Errorf("the attempts carried keys %q, want %q twice, then none (the secret's GET)", keys, res.IdempotencyKey)
	}
	again, err := c.CreateWebhookEndpoint(ctx, req, client.WithIdempotencyKey(res.IdempotencyKey))
	if err != nil {
		t.Fatal(err)
	}
	if again.Endpoint.EndpointID != e.EndpointID || again.Endpoint.Secret != e.Secret || !again.Replayed {
		t.Errorf("the same registration again: %+v, want the stored answer", again)
	}
	// The same key for another URL is another command.
	other := req
	other.URL = "https://merchant.example/other"
	_, err = c.CreateWebhookEndpoint(ctx, other, client.WithIdempotencyKey(res.IdempotencyKey))
	wantProblem(t, err, 422, client.CodeIdempotencyKeyReused)

	wantOnlyEndpoint(t, c, e.EndpointID, req)

	// A rotation is idempotent too: a lost answer is replayed with the
	// same new secret, not rotated again.
	f.drop(1)
	rotated, err := c.RotateWebhookSecret(ctx, e.EndpointID)
	if err != nil {
		t.Fatal(err)
	}
	if rotated.StatusCode != 200 || !rotated.Replayed || rotated.Attempts != 2 || rotated.Endpoint.EndpointID != e.EndpointID ||
		!strings.HasPrefix(rotated.Endpoint.Secret, "whsec_") || rotated.Endpoint.Secret == e.Secret || !strings.HasPrefix(rotated.Endpoint.RotationID, "wsr_") {
		t.Errorf("rotation: %+v, want a new secret, replayed on the second attempt", rotated)
	}
	_, err = c.RotateWebhookSecret(ctx, "we_other", client.WithIdempotencyKey(rotated.IdempotencyKey))
	wantProblem(t, err, 422, client.CodeIdempotencyKeyReused)
	_, err = c.RotateWebhookSecret(ctx, "we_unknown")
	wantProblem(t, err, 404, client.CodeNotFound)

	// Deleted once; a delete whose answer was lost is done when the retry
	// finds the endpoint gone; a delete of an unknown endpoint is not.
	if err := c.DeleteWebhookEndpoint(ctx, e.EndpointID); err != nil {
		t.Fatal(err)
	}
	err = c.DeleteWebhookEndpoint(ctx, e.EndpointID)
	wantProblem(t, err, 404, client.CodeNotFound)
	second, err := c.CreateWebhookEndpoint(ctx, client.CreateWebhookEndpointRequest{URL: "https://merchant.example/all"})
	if err != nil {
		t.Fatal(err)
	}
	if len(second.Endpoint.EventTypes) != 0 {
		t.Errorf("eventTypes %v, want none: every type", second.Endpoint.EventTypes)
	}
	f.drop(1)
	if err := c.DeleteWebhookEndpoint(ctx, second.Endpoint.EndpointID); err != nil {
		t.Errorf("a delete whose answer was lost: %v, want done", err)
	}
	if _, err := c.GetWebhookEndpoint(ctx, second.Endpoint.EndpointID); err == nil {
		t.Error("the endpoint is still there after its delete")
	}
}

func TestWebhookEndpointRefusalsAreFinal(t *testing.T) {
	t.Parallel()
	f := newFakeAPI(t)
	c := fakeClient(t, f)
	ctx := context.Background()
	for _, tc := range []struct {
		url    string
		status int
		code   client.Code
	}{
		{"https://internal.example/hooks", 400, client.CodeWebhookURLForbidden},
		{"not a url", 400, client.CodeValidationFailed},
	} {
		before := len(f.keys())
		_, err := c.CreateWebhookEndpoint(ctx, client.CreateWebhookEndpointRequest{URL: tc.url})
		wantProblem(t, err, tc.status, tc.code)
		if n := len(f.keys()) - before; n != 1 {
			t.Errorf("%s: %d attempts, want 1: a 400 is final", tc.url, n)
		}
	}
	bad := fakeClientWithSecret(t, f, "sk_wrong")
	_, err := bad.ListWebhookEndpoints(ctx)
	wantProblem(t, err, 401, client.CodeUnauthorized)
}

func TestEventsDeliveriesAndResend(t *testing.T) {
	t.Parallel()
	f := newFakeAPI(t)
	c := fakeClient(t, f)
	ctx := context.Background()
	hook, err := c.CreateWebhookEndpoint(ctx, client.CreateWebhookEndpointRequest{URL: "https://merchant.example/hooks"})
	if err != nil {
		t.Fatal(err)
	}
	first := paid(t, c, "pm_card_visa")
	req := payReq()
	req.MerchantReference = "inv-2"
	if _, err := c.CreatePayment(ctx, req); err != nil {
		t.Fatal(err)
	}

	// Newest first, by type, one page at a time.
	page, err := c.ListEvents(ctx, client.ListEventsParams{Type: client.EventPaymentSucceeded, Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Items) != 1 || page.Items[0].Type != client.EventPaymentSucceeded || page.NextCursor == "" {
		t.Fatalf("first page: %+v, want one payment.succeeded and a cursor", page)
	}
	last, err := c.ListEvents(ctx, client.ListEventsParams{Type: client.EventPaymentSucceeded, Limit: 1, Cursor: page.NextCursor})
	if err != nil {
		t.Fatal(err)
	}
	if len(last.Items) != 1 || last.NextCursor != "" {
		t.Fatalf("last page: %+v", last)
	}
	oldest := last.Items[0]
	p, err := oldest.Data.AsPayment()
	if err != nil || p.PaymentID != first.PaymentID || p.Status != client.PaymentSucceeded {
		t.Errorf("the oldest payment.succeeded carries %+v (%v), want payment %s SUCCEEDED", p, err, first.PaymentID)
	}
	all, err := c.ListEvents(ctx, client.ListEventsParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all.Items) != 4 {
		t.Errorf("%d events, want 4 (created and succeeded, twice)", len(all.Items))
	}
	got, err := c.GetEvent(ctx, oldest.EventID)
	if err != nil {
		t.Fatal(err)
	}
	if got.EventID != oldest.EventID || got.Type != oldest.Type || !got.CreatedAt.Equal(oldest.CreatedAt) {
		t.Errorf("GetEvent: %+v, want %+v", got, oldest)
	}
	_, err = c.GetEvent(ctx, "unknown")
	wantProblem(t, err, 404, client.CodeNotFound)
	_, err = c.ListEvents(ctx, client.ListEventsParams{Cursor: "not-a-cursor"})
	wantProblem(t, err, 400, client.CodeValidationFailed)

	deliveries, err := c.ListEventDeliveries(ctx, oldest.EventID)
	if err != nil {
		t.Fatal(err)
	}
	if len(deliveries.Items) != 1 || deliveries.Items[0].EndpointID != hook.Endpoint.EndpointID || deliveries.Items[0].StatusCode != 200 {
		t.Errorf("deliveries %+v, want one successful attempt to %s", deliveries.Items, hook.Endpoint.EndpointID)
	}

	// A resend answers 202, once: the 202 is its answer, never retried
	// as an outcome still unknown, and a lost answer is replayed rather
	// than sent again.
	f.drop(1)
	before := len(f.keys())
	res, err := c.ResendEvent(ctx, oldest.EventID, client.ResendEventRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != 202 || res.StillProcessing() || !res.Replayed || res.Attempts != 2 || len(f.keys())-before != 2 {
		t.Errorf("outcome %+v after %d requests, want the replayed 202 on the second attempt", res.Outcome, len(f.keys())-before)
	}
	if r := res.Receipt; !strings.HasPrefix(r.ResendID, "evr_") || r.EventID != oldest.EventID || len(r.EndpointIds) != 1 || r.EndpointIds[0] != hook.Endpoint.EndpointID {
		t.Errorf("receipt %+v", res.Receipt)
	}
	if deliveries, err := c.ListEventDeliveries(ctx, oldest.EventID); err != nil || len(deliveries.Items) != 2 {
		t.Errorf("deliveries after one resend: %+v (%v), want 2", deliveries, err)
	}
	one, err := c.ResendEvent(ctx, oldest.EventID, client.ResendEventRequest{EndpointID: hook.Endpoint.EndpointID}, client.WithIdempotencyKey("resend-one"))
	if err != nil {
		t.Fatal(err)
	}
	if one.Attempts != 1 || one.Replayed || one.IdempotencyKey != "resend-one" {
		t.Errorf("resend to one endpoint: %+v", one.Outcome)
	}
	_, err = c.ResendEvent(ctx, oldest.EventID, client.ResendEventRequest{}, client.WithIdempotencyKey("resend-one"))
	wantProblem(t, err, 422, client.CodeIdempotencyKeyReused)
	_, err = c.ResendEvent(ctx, oldest.EventID, client.ResendEventRequest{EndpointID: "we_unknown"})
	wantProblem(t, err, 404, client.CodeNotFound)
}

// TestWebhookCallsRetryWhatMaySucceedOnARepeat: a rotation is retried
// under its key on 409 IDEMPOTENCY_KEY_IN_USE, a read on 503.
func TestWebhookCallsRetryWhatMaySucceedOnARepeat(t *testing.T) {
	t.Parallel()
	const endpoint = `{"endpointId":"we_1","url":"https://merchant.example/hooks","eventTypes":[],"description":"",` +
		`"status":"enabled","createdAt":"2026-01-15T09:00:00Z"}`
	answer := func(status int, body string) step {
		return func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_, _ = w.Write([]byte(body))
		}
	}
	s := newScripted(t, problem(409, "IDEMPOTENCY_KEY_IN_USE", "1"), dropConnection,
		answer(200, strings.TrimSuffix(endpoint, "}")+`,"secret":"whsec_AAAA"}`))
	res, err := s.client(newFakeClock(), 0.5, client.RetryPolicy{}).RotateWebhookSecret(context.Background(), "we_1", client.WithIdempotencyKey("rot-1"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Attempts != 3 || res.Endpoint.Secret != "whsec_AAAA" {
		t.Errorf("result %+v, want the secret at the third attempt", res)
	}
	for i, r := range s.requests() {
		if r.Method != "POST" || r.URL.Path != "/webhook-endpoints/we_1/rotate-secret" || r.Header.Get("Idempotency-Key") != "rot-1" {
			t.Errorf("attempt %d: %s %s with key %q", i+1, r.Method, r.URL.Path, r.Header.Get("Idempotency-Key"))
		}
	}

	s = newScripted(t, problem(503, "SERVICE_UNAVAILABLE", "1"), answer(200, endpoint))
	got, err := s.client(newFakeClock(), 0.5, client.RetryPolicy{}).GetWebhookEndpoint(context.Background(), "we_1")
	if err != nil {
		t.Fatal(err)
	}
	if got.EndpointID != "we_1" || len(s.requests()) != 2 {
		t.Errorf("endpoint %+v after %d requests", got, len(s.requests()))
	}
	// A delete's 404 to its first attempt is an error, and final.
	s = newScripted(t, problem(404, "NOT_FOUND", ""))
	err = s.client(newFakeClock(), 0.5, client.RetryPolicy{}).DeleteWebhookEndpoint(context.Background(), "we_1")
	var p *client.Error
	if !errors.As(err, &p) || p.Code != client.CodeNotFound || len(s.requests()) != 1 {
		t.Errorf("delete of an unknown endpoint: %v after %d requests, want NOT_FOUND after 1", err, len(s.requests()))
	}
}
