package main

import (
	"context"
	"fmt"
	"strings"
	"time"

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

// list is `paymentsctl list`: GET /payments with its filters, one page
// (from -cursor), or with -all every page, following nextCursor, printed
// as one list.
func list(ctx context.Context, c *client.Client, args []string, out *output) int {
	fs := subcommandFlags("list")
	var (
		params   client.ListPaymentsParams
		statuses string
		from, to timeFlag
		all      bool
	)
	fs.StringVar(&params.AccountID, "account", "", "only this account's payments")
	fs.StringVar(&params.MerchantReference, "reference", "", "only the payments with this merchant reference")
	fs.StringVar(&statuses, "status", "", "only the payments in these statuses, comma-separated (SUCCEEDED,DECLINED,...)")
	fs.Var(&from, "from", "only the payments created at or after this time (RFC 3339, or a date: its midnight UTC)")
	fs.Var(&to, "to", "only the payments created before this time (RFC 3339, or a date: its midnight UTC)")
	fs.IntVar(&params.Limit, "limit", 0, "page size, 1 to 100 (default: the server's, 20)")
	fs.StringVar(&params.Cursor, "cursor", "", "start after this position: the nextCursor of a page")
	fs.BoolVar(&all, "all", false, "every page, following nextCursor, printed as one list")
	if err := fs.Parse(args); err != nil {
		return out.usage(err)
	}
	if err := noArgs(fs); err != nil {
		return out.usage(err)
	}
	for s := range strings.SplitSeq(statuses, ",") {
		if s = strings.TrimSpace(s); s != "" {
			params.Statuses = append(params.Statuses, client.PaymentStatus(strings.ToUpper(s)))
		}
	}
	params.CreatedFrom, params.CreatedTo = time.Time(from), time.Time(to)
	page, err := c.ListPayments(ctx, params)
	if all && err == nil {
		err = followPages(&page.Items, &page.NextCursor, func(cursor string) ([]client.Payment, string, error) {
			params.Cursor = cursor
			next, err := c.ListPayments(ctx, params)
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

// timeFlag is a flag holding a time: RFC 3339, or a date (its midnight
// UTC).
type timeFlag time.Time

func (f *timeFlag) String() string {
	if f == nil || time.Time(*f).IsZero() {
		return ""
	}
	return time.Time(*f).Format(time.RFC3339Nano)
}

func (f *timeFlag) Set(s string) error {
	for _, layout := range []string{time.RFC3339Nano, time.DateOnly} {
		if t, err := time.Parse(layout, s); err == nil {
			*f = timeFlag(t)
			return nil
		}
	}
	return fmt.Errorf("%q is not an RFC 3339 time (2026-01-31T23:00:00Z) or a date (2026-01-31)", s)
}
