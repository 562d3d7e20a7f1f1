package main

import (
	"context"
	"fmt"

	"github.com/paymentsapi/paymentsapi/client"
)

// pay is `paymentsctl pay`: POST /payments.
func pay(ctx context.Context, c *client.Client, args []string, out *output) int {
	fs := subcommandFlags("pay")
	var req client.CreatePaymentRequest
	fs.StringVar(&req.AccountID, "account", "", "the customer account")
	fs.StringVar(&req.Amount, "amount", "", "the amount, a decimal string such as 10.00")
	fs.StringVar(&req.Currency, "currency", "", "the ISO 4217 currency, such as EUR")
	fs.StringVar(&req.MerchantReference, "reference", "", "the merchant's reference (order, invoice)")
	fs.StringVar(&req.PaymentMethod, "method", "", "the payment method, such as pm_card_visa")
	fs.StringVar(&req.Description, "description", "", "free text")
	fs.StringVar(&req.ReturnURL, "return-url", "", "where the customer goes back to after authenticating (3-D Secure), if the payment asks")
	captureMethod := fs.String("capture", "", "automatic (the default: charge now) or manual (authorize only; capture or cancel later)")
	key := fs.String("idempotency-key", "", "the operation's key; default: a new one, printed on stderr")
	if err := fs.Parse(args); err != nil {
		return out.usage(err)
	}
	if err := noArgs(fs); err != nil {
		return out.usage(err)
	}
	req.CaptureMethod = client.CaptureMethod(*captureMethod)
	res, err := c.CreatePayment(ctx, req, out.idempotent(*key))
	if err != nil {
		return out.failure(err)
	}
	code := out.created(res.Payment, res.Outcome)
	if code != exitOK || res.Payment.Status != client.PaymentRequiresAction || res.Payment.NextAction == nil {
		return code
	}
	// The payment waits for its customer: the URL to send them to, on its
	// own line, then how to play the customer here.
	_, _ = fmt.Fprintf(out.stderr, "nextAction: %s\n", res.Payment.NextAction.URL)
	out.errorf("the customer must authenticate: open nextAction in a browser, or run paymentsctl approve (or fail) with it")
	return exitRequiresAction
}
