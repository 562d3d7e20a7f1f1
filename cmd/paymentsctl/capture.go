package main

import (
	"context"

	"github.com/paymentsapi/paymentsapi/client"
)

// capture is `paymentsctl capture PAYMENT_ID`: POST /payments/{paymentId}/capture.
func capture(ctx context.Context, c *client.Client, args []string, out *output) int {
	fs := subcommandFlags("capture")
	var req client.CapturePaymentRequest
	fs.StringVar(&req.Amount, "amount", "", "the amount to capture, a decimal string such as 8.00; default: all that is capturable")
	key := fs.String("idempotency-key", "", "the operation's key; default: a new one, printed on stderr")
	id, err := parseWithID(fs, args, "PAYMENT_ID")
	if err != nil {
		return out.usage(err)
	}
	res, err := c.CapturePayment(ctx, id, req, out.idempotent(*key))
	if err != nil {
		return out.failure(err)
	}
	return out.created(res.Payment, res.Outcome)
}

// cancel is `paymentsctl cancel PAYMENT_ID`: POST /payments/{paymentId}/cancel.
func cancel(ctx context.Context, c *client.Client, args []string, out *output) int {
	fs := subcommandFlags("cancel")
	reason := fs.String("reason", "", "requested_by_customer, duplicate, fraudulent or abandoned")
	key := fs.String("idempotency-key", "", "the operation's key; default: a new one, printed on stderr")
	id, err := parseWithID(fs, args, "PAYMENT_ID")
	if err != nil {
		return out.usage(err)
	}
	res, err := c.CancelPayment(ctx, id, client.CancelPaymentRequest{Reason: client.CancelReason(*reason)}, out.idempotent(*key))
	if err != nil {
		return out.failure(err)
	}
	return out.created(res.Payment, res.Outcome)
}
