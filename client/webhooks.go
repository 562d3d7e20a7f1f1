package client

import (
	"context"
	"errors"
	"net/http"

	"github.com/paymentsapi/paymentsapi/client/internal/apigen"
)

// WebhookEndpointResult is the answer to CreateWebhookEndpoint and
// RotateWebhookSecret: the endpoint with its signing secret. The server
// shows the secret in its first answer only, and stores none in the answer
// it replays ("secret": null): when the call's answer is a replay (a retry
// after a lost answer), the client reads the endpoint's current secret
// with GetWebhookEndpointSecret, so the result carries one either way.
// Store it before anything else.
type WebhookEndpointResult struct {
	Endpoint WebhookEndpointWithSecret
	Outcome
}

// ResendResult is the answer to ResendEvent: the endpoints the event is
// sent to again. Its Outcome's StatusCode is 202, and it is final: the
// resend is queued, and a retry with the same key sends nothing more.
type ResendResult struct {
	Receipt ResendReceipt
	Outcome
}

// CreateWebhookEndpoint registers a URL the service sends the tenant's
// events to, signed with the secret of the answer, retrying under one
// idempotency key (its own scope), so that a lost answer costs no second
// endpoint. A URL the server does not send to (plain http, or a non-public
// address, where it forbids them) is an *Error with Code
// CodeWebhookURLForbidden.
func (c *Client) CreateWebhookEndpoint(ctx context.Context, req CreateWebhookEndpointRequest, opts ...CallOption) (*WebhookEndpointResult, error) {
	o := c.callOptions(opts)
	params := &apigen.CreateWebhookEndpointParams{IdempotencyKey: o.key, Prefer: o.prefer()}
	return c.endpointCall(ctx, "POST /webhook-endpoints", o, func(ctx context.Context) (*http.Response, error) {
		return c.raw.CreateWebhookEndpoint(ctx, params, req, c.edit)
	})
}

// RotateWebhookSecret gives the endpoint a new signing secret and answers
// it, retrying under one idempotency key (its own scope), so that a retry
// rotates nothing more. For 24 hours both secrets sign every delivery.
func (c *Client) RotateWebhookSecret(ctx context.Context, endpointID string, opts ...CallOption) (*WebhookEndpointResult, error) {
	return c.RotateWebhookSecretWith(ctx, endpointID, RotateWebhookSecretRequest{}, opts...)
}

// RotateWebhookSecretWith is RotateWebhookSecret with req: how long the
// replaced secret keeps signing (PreviousSecretExpiresIn, "0s" to "24h";
// "0s" stops it at once, for a secret that leaked).
func (c *Client) RotateWebhookSecretWith(ctx context.Context, endpointID string, req RotateWebhookSecretRequest, opts ...CallOption) (*WebhookEndpointResult, error) {
	o := c.callOptions(opts)
	params := &apigen.RotateWebhookSecretParams{IdempotencyKey: o.key, Prefer: o.prefer()}
	return c.endpointCall(ctx, "POST /webhook-endpoints/"+endpointID+"/rotate-secret", o, func(ctx context.Context) (*http.Response, error) {
		return c.raw.RotateWebhookSecret(ctx, endpointID, params, req, c.edit)
	})
}

// GetWebhookEndpointSecret returns the secret that signs the endpoint's
// deliveries now.
func (c *Client) GetWebhookEndpointSecret(ctx context.Context, endpointID string) (*WebhookEndpointSecret, error) {
	return get[WebhookEndpointSecret](ctx, c, "GET /webhook-endpoints/"+endpointID+"/secret", func(ctx context.Context) (*http.Response, error) {
		return c.raw.GetWebhookEndpointSecret(ctx, endpointID, c.edit)
	})
}

// endpointCall runs an idempotent call that answers with an endpoint and
// its secret; a replay, which holds none, is completed with the endpoint's
// current one.
func (c *Client) endpointCall(ctx context.Context, op string, o callOptions, send func(context.Context) (*http.Response, error)) (*WebhookEndpointResult, error) {
	e, out, err := create[WebhookEndpointWithSecret](ctx, c, op, o, send)
	if err != nil {
		return nil, err
	}
	if e.Secret == "" {
		s, err := c.GetWebhookEndpointSecret(ctx, e.EndpointID)
		if err != nil {
			return nil, err
		}
		e.Secret = s.Secret
	}
	return &WebhookEndpointResult{Endpoint: *e, Outcome: out}, nil
}

// ListWebhookEndpoints returns the tenant's webhook endpoints, newest
// first, without their secrets.
func (c *Client) ListWebhookEndpoints(ctx context.Context) (*WebhookEndpointList, error) {
	return get[WebhookEndpointList](ctx, c, "GET /webhook-endpoints", func(ctx context.Context) (*http.Response, error) {
		return c.raw.ListWebhookEndpoints(ctx, c.edit)
	})
}

// GetWebhookEndpoint returns one webhook endpoint, without its secret.
func (c *Client) GetWebhookEndpoint(ctx context.Context, endpointID string) (*WebhookEndpoint, error) {
	return get[WebhookEndpoint](ctx, c, "GET /webhook-endpoints/"+endpointID, func(ctx context.Context) (*http.Response, error) {
		return c.raw.GetWebhookEndpoint(ctx, endpointID, c.edit)
	})
}

// DeleteWebhookEndpoint deletes a webhook endpoint: no delivery to it
// starts afterwards. It is retried like a read, without a key, since
// deleting twice deletes nothing more. A 404 NOT_FOUND to a retry is taken
// for success: an earlier attempt whose answer was lost may have deleted
// the endpoint, and either way it is gone, which is what the call asked.
// A 404 to the first attempt is an *Error, as for any unknown endpoint.
func (c *Client) DeleteWebhookEndpoint(ctx context.Context, endpointID string) error {
	_, out, err := c.run(ctx, exchange{op: "DELETE /webhook-endpoints/" + endpointID, send: func(ctx context.Context) (*http.Response, error) {
		return c.raw.DeleteWebhookEndpoint(ctx, endpointID, c.edit)
	}})
	var p *Error
	if errors.As(err, &p) && p.Status == http.StatusNotFound && p.Code == CodeNotFound && out.Attempts > 1 {
		return nil
	}
	return err
}

// ListEvents returns one page of the tenant's events, newest first. Pass
// the page's NextCursor as params.Cursor, with the same filters, for the
// next one.
func (c *Client) ListEvents(ctx context.Context, params ListEventsParams) (*EventList, error) {
	return get[EventList](ctx, c, "GET /events", func(ctx context.Context) (*http.Response, error) {
		return c.raw.ListEvents(ctx, params.generated(), c.edit)
	})
}

// GetEvent returns one event of the tenant's log.
func (c *Client) GetEvent(ctx context.Context, eventID string) (*Event, error) {
	return get[Event](ctx, c, "GET /events/"+eventID, func(ctx context.Context) (*http.Response, error) {
		return c.raw.GetEvent(ctx, eventID, c.edit)
	})
}

// ListEventDeliveries returns every attempt to deliver the event to the
// tenant's webhook endpoints, newest first.
func (c *Client) ListEventDeliveries(ctx context.Context, eventID string) (*DeliveryList, error) {
	return get[DeliveryList](ctx, c, "GET /events/"+eventID+"/deliveries", func(ctx context.Context) (*http.Response, error) {
		return c.raw.ListEventDeliveries(ctx, eventID, c.edit)
	})
}

// ResendEvent delivers the event again, now, to every enabled endpoint
// subscribed to its type, or to req.EndpointID only. It retries under one
// idempotency key (its own scope), so that a lost answer does not send the
// event once more per retry. Its 202 is its answer, not an outcome still
// unknown: it is not retried, and StillProcessing reports false.
func (c *Client) ResendEvent(ctx context.Context, eventID string, req ResendEventRequest, opts ...CallOption) (*ResendResult, error) {
	o := c.callOptions(opts)
	params := &apigen.ResendEventParams{IdempotencyKey: o.key, Prefer: o.prefer()}
	r, out, err := idempotent[ResendReceipt](ctx, c, exchange{
		op: "POST /events/" + eventID + "/resend", create: true, accepted: true, key: o.key, wait: o.preferWait,
		send: func(ctx context.Context) (*http.Response, error) {
			return c.raw.ResendEvent(ctx, eventID, params, req, c.edit)
		},
	})
	if err != nil {
		return nil, err
	}
	return &ResendResult{Receipt: *r, Outcome: out}, nil
}
