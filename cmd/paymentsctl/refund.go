package main

import (
	"context"

	"github.com/paymentsapi/paymentsapi/client"
)

// refund is `paymentsctl refund PAYMENT_ID`: POST /payments/{paymentId}/refunds.
func refund(ctx context.Context, c *client.Client, args []string, out *output) int {
	fs := subcommandFlags("refund")
	var req client.CreateRefundRequest
	fs.StringVar(&req.Amount, "amount", "", "the amount to refund, a decimal string such as 3.00")
	reason := fs.String("reason", "", "requested_by_customer, duplicate or fraudulent")
	key := fs.String("idempotency-key", "", "the operation's key; default: a new one, printed on stderr")
	id, err := parseWithID(fs, args, "PAYMENT_ID")
	if err != nil {
		return out.usage(err)
	}
	req.Reason = client.RefundReason(*reason)
	res, err := c.CreateRefund(ctx, id, req, out.idempotent(*key))
	if err != nil {
		return out.failure(err)
	}
	return out.created(res.Refund, res.Outcome)
}
