package main

import (
	"context"
	"fmt"
	"time"

	"github.com/paymentsapi/paymentsapi/client"
)

// endpoints is `paymentsctl endpoints list|create|delete`: the tenant's
// webhook endpoints.
func endpoints() command {
	return group("endpoints", map[string]command{"list": endpointsList, "create": endpointsCreate, "delete": endpointsDelete})
}

// endpointsList is `paymentsctl endpoints list`: GET /webhook-endpoints,
// without their secrets.
func endpointsList(ctx context.Context, c *client.Client, args []string, out *output) int {
	fs := subcommandFlags("endpoints list")
	if err := fs.Parse(args); err != nil {
		return out.usage(err)
	}
	if err := noArgs(fs); err != nil {
		return out.usage(err)
	}
	list, err := c.ListWebhookEndpoints(ctx)
	if err != nil {
		return out.failure(err)
	}
	shown := make([]shownEndpoint, len(list.Items))
	for i, e := range list.Items {
		shown[i] = shownEndpoint{e, disabledAt(e.DisabledAt)}
	}
	return out.resource(struct {
		Items []shownEndpoint `json:"items"`
	}{shown})
}

// endpointsCreate is `paymentsctl endpoints create -url URL`: POST
// /webhook-endpoints, idempotent. It prints the endpoint with its signing
// secret, as the API answers it (GET /webhook-endpoints never shows it).
func endpointsCreate(ctx context.Context, c *client.Client, args []string, out *output) int {
	fs := subcommandFlags("endpoints create")
	var req client.CreateWebhookEndpointRequest
	fs.StringVar(&req.URL, "url", "", "where to POST the events: an https URL (http and private addresses only where the server allows them)")
	types := fs.String("events", "", "comma-separated event types to send, such as payment.succeeded,refund.succeeded; default: every type")
	fs.StringVar(&req.Description, "description", "", "free text for people")
	key := fs.String("idempotency-key", "", "the operation's key; default: a new one, printed on stderr")
	if err := fs.Parse(args); err != nil {
		return out.usage(err)
	}
	if err := noArgs(fs); err != nil {
		return out.usage(err)
	}
	if req.URL == "" {
		return out.usage(fmt.Errorf("%s needs -url", fs.Name()))
	}
	var err error
	if req.EventTypes, err = eventTypes(fs, "events", *types); err != nil {
		return out.usage(err)
	}
	res, err := c.CreateWebhookEndpoint(ctx, req, out.idempotent(*key))
	if err != nil {
		return out.failure(err)
	}
	return out.resource(shownEndpointWithSecret{res.Endpoint, disabledAt(res.Endpoint.DisabledAt)})
}

// endpointsDelete is `paymentsctl endpoints delete ENDPOINT_ID`: DELETE
// /webhook-endpoints/{endpointId}; no delivery to it starts afterwards.
func endpointsDelete(ctx context.Context, c *client.Client, args []string, out *output) int {
	id, err := parseWithID(subcommandFlags("endpoints delete"), args, "ENDPOINT_ID")
	if err != nil {
		return out.usage(err)
	}
	if err := c.DeleteWebhookEndpoint(ctx, id); err != nil {
		return out.failure(err)
	}
	_, _ = fmt.Fprintf(out.stderr, "deleted: %s\n", id)
	return exitOK
}

// shownEndpoint and shownEndpointWithSecret are an endpoint as printed:
// disabledAt only when it is set, as the API answers it (the client's
// type, a time.Time, would print a zero time for every enabled endpoint).
type (
	shownEndpoint struct {
		client.WebhookEndpoint
		DisabledAt *time.Time `json:"disabledAt,omitempty"`
	}
	shownEndpointWithSecret struct {
		client.WebhookEndpointWithSecret
		DisabledAt *time.Time `json:"disabledAt,omitempty"`
	}
)

// disabledAt is t, or nil when it is zero.
func disabledAt(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
