package main

import (
	"context"
	"time"

	"github.com/paymentsapi/paymentsapi/client"
)

// events is `paymentsctl events list|get|resend`: the tenant's event log.
func events() command {
	return group("events", map[string]command{"list": eventsList, "get": eventsGet, "resend": eventsResend})
}

// eventsList is `paymentsctl events list`: GET /events with its filters,
// one page (from -cursor), or with -all every page, following nextCursor,
// printed as one list.
func eventsList(ctx context.Context, c *client.Client, args []string, out *output) int {
	fs := subcommandFlags("events list")
	var (
		params          client.ListEventsParams
		types           string
		from, to, after timeFlag
		all             bool
	)
	fs.StringVar(&types, "type", "", "only the events of these types, comma-separated (payment.succeeded,refund.succeeded,...)")
	fs.StringVar(&params.PaymentID, "payment", "", "only the events of this payment and of its refunds")
	fs.Var(&from, "from", "only the events that happened at or after this time (RFC 3339, or a date: its midnight UTC)")
	fs.Var(&to, "to", "only the events that happened before this time (RFC 3339, or a date: its midnight UTC)")
	fs.Var(&after, "after", "only the events that happened after this time (RFC 3339, or a date: its midnight UTC)")
	fs.IntVar(&params.Limit, "limit", 0, "page size, 1 to 100 (default: the server's, 20)")
	fs.StringVar(&params.Cursor, "cursor", "", "start after this position: the nextCursor of a page")
	fs.BoolVar(&all, "all", false, "every page, following nextCursor, printed as one list")
	if err := fs.Parse(args); err != nil {
		return out.usage(err)
	}
	if err := noArgs(fs); err != nil {
		return out.usage(err)
	}
	var err error
	if params.Types, err = eventTypes(fs, "type", types); err != nil {
		return out.usage(err)
	}
	params.CreatedFrom, params.CreatedTo, params.After = time.Time(from), time.Time(to), time.Time(after)
	page, err := c.ListEvents(ctx, params)
	if all && err == nil {
		err = followPages(&page.Items, &page.NextCursor, func(cursor string) ([]client.Event, string, error) {
			params.Cursor = cursor
			next, err := c.ListEvents(ctx, params)
			if err != nil {
				return nil, "", err
			}
			return next.Items, next.NextCursor, nil
		})
	}
	if err != nil {
		return out.failure(err)
	}
	return out.resource(page)
}

// eventsGet is `paymentsctl events get EVENT_ID`: GET /events/{eventId}.
func eventsGet(ctx context.Context, c *client.Client, args []string, out *output) int {
	id, err := parseWithID(subcommandFlags("events get"), args, "EVENT_ID")
	if err != nil {
		return out.usage(err)
	}
	e, err := c.GetEvent(ctx, id)
	if err != nil {
		return out.failure(err)
	}
	return out.resource(e)
}

// eventsResend is `paymentsctl events resend EVENT_ID`: POST
// /events/{eventId}/resend, idempotent. Its 202 is its answer: the receipt
// names the endpoints the event is sent to again.
func eventsResend(ctx context.Context, c *client.Client, args []string, out *output) int {
	fs := subcommandFlags("events resend")
	var req client.ResendEventRequest
	fs.StringVar(&req.EndpointID, "endpoint", "", "send it to this endpoint only (we_...); default: every enabled endpoint subscribed to its type")
	key := fs.String("idempotency-key", "", "the operation's key; default: a new one, printed on stderr")
	id, err := parseWithID(fs, args, "EVENT_ID")
	if err != nil {
		return out.usage(err)
	}
	res, err := c.ResendEvent(ctx, id, req, out.idempotent(*key))
	if err != nil {
		return out.failure(err)
	}
	return out.resource(res.Receipt)
}
