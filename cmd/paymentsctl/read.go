package main

import (
	"context"

	"github.com/paymentsapi/paymentsapi/client"
)

// get is `paymentsctl get PAYMENT_ID`: GET /payments/{paymentId}.
func get(ctx context.Context, c *client.Client, args []string, out *output) int {
	fs := subcommandFlags("get")
	id, err := parseWithID(fs, args, "PAYMENT_ID")
	if err != nil {
		return out.usage(err)
	}
	p, err := c.GetPayment(ctx, id)
	if err != nil {
		return out.failure(err)
	}
	return out.resource(p)
}

// list is `paymentsctl list`: GET /payments, one page.
func list(ctx context.Context, c *client.Client, args []string, out *output) int {
	fs := subcommandFlags("list")
	var params client.ListPaymentsParams
	fs.StringVar(&params.AccountID, "account", "", "only this account's payments")
	fs.IntVar(&params.Limit, "limit", 0, "page size, 1 to 100 (default: the server's, 20)")
	if err := fs.Parse(args); err != nil {
		return out.usage(err)
	}
	if err := noArgs(fs); err != nil {
		return out.usage(err)
	}
	page, err := c.ListPayments(ctx, params)
	if err != nil {
		return out.failure(err)
	}
	return out.resource(page)
}
