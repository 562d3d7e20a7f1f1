// Command paymentsctl is the command line of the payments API, on package
// client: it retries the way the contract asks (one idempotency key per
// command, reused on every attempt) and prints the resource as JSON on
// stdout, problems on stderr.
//
//	paymentsctl [-url URL] [-api-key KEY] pay -account ID -amount 10.00 -currency EUR \
//	    -reference INV -method pm_card_visa [-capture automatic|manual] \
//	    [-idempotency-key K] [-description TEXT] [-return-url URL]
//	paymentsctl approve [-fail] NEXT_ACTION_URL
//	paymentsctl fail NEXT_ACTION_URL
//	paymentsctl get PAYMENT_ID
//	paymentsctl list [-account ID] [-reference REF] [-status S,...] [-from T] [-to T] \
//	    [-limit N] [-cursor C | -all]
//	paymentsctl refund PAYMENT_ID -amount 3.00 [-reason R] [-idempotency-key K]
//	paymentsctl capture PAYMENT_ID [-amount A] [-idempotency-key K]
//	paymentsctl cancel PAYMENT_ID [-reason R] [-idempotency-key K]
//	paymentsctl listen [-events payment.succeeded,...] [-forward-to URL] [-addr 127.0.0.1:0]
//	paymentsctl events list [-type T,...] [-payment ID] [-from T] [-to T] [-after T] \
//	    [-limit N] [-cursor C | -all]
//	paymentsctl events get EVENT_ID
//	paymentsctl events resend EVENT_ID [-endpoint ENDPOINT_ID] [-idempotency-key K]
//	paymentsctl endpoints list
//	paymentsctl endpoints create -url URL [-events T,...] [-description TEXT] [-idempotency-key K]
//	paymentsctl endpoints delete ENDPOINT_ID
//
//	paymentsctl stripe-webhook PAYMENT_OR_REFUND_ID [-type T] [-secret S] [-object ID]
//
// -url and -api-key default to $PAYMENTS_URL and $PAYMENTS_API_KEY, then to
// the dev server (http://127.0.0.1:8080, sk_test_demo). Without
// -idempotency-key, pay, refund, capture, cancel, events resend and
// endpoints create generate one key for the command and print it on stderr,
// so that the command can be run again with it. pay -capture manual only
// authorizes the payment (REQUIRES_CAPTURE): capture takes all of it, or
// -amount of it, and cancel voids it.
//
// A payment whose customer must authenticate (3-D Secure, such as
// pm_card_threeDSecureRequired) is answered 201 REQUIRES_ACTION: pay
// prints it, then "nextAction: URL" on stderr, and exits 4. approve plays
// the customer on the provider simulator's challenge page at that URL: it
// presses Approve (fail, or approve -fail: Fail), follows the provider's
// redirect to the service's return route, which settles the payment, and
// no further, and prints the payment.
//
// listen receives the tenant's webhooks on this machine until interrupted:
// it registers a temporary endpoint on 127.0.0.1, prints each delivery it
// verified (Standard Webhooks) as one JSON line on stdout, or forwards it
// to -forward-to, and deletes the endpoint on exit. It needs a server that
// sends to plain http and loopback addresses (WEBHOOK_ALLOW_HTTP and
// WEBHOOK_ALLOW_PRIVATE, the defaults of dev mode).
//
// Exit status: 0 done (201, 200); 2 declined (402: a payment, refund or
// capture the provider declined; after approve or fail, a payment
// DECLINED); 3 still processing after the last attempt (202: run the
// command again with the same key, or get the payment, to learn the
// outcome); 4 the customer must authenticate (201 REQUIRES_ACTION: open
// nextAction.url, or run approve with it; after approve, a payment not
// settled yet); 1 any other error.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/paymentsapi/paymentsapi/client"
)

// The exit statuses.
const (
	exitOK         = 0
	exitError      = 1
	exitDeclined   = 2
	exitProcessing = 3
	// exitRequiresAction: the payment waits for its customer to
	// authenticate (201 REQUIRES_ACTION).
	exitRequiresAction = 4
)

// The dev server's address and demo secret, the last defaults of -url and
// -api-key.
const (
	devURL    = "http://127.0.0.1:8080"
	devAPIKey = "sk_test_demo"
)

// preferWait is sent with creates: a retry that finds its original still in
// flight is held for it instead of answered 409.
const preferWait = 5 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

const usage = `usage:
  paymentsctl [-url URL] [-api-key KEY] pay -account ID -amount 10.00 -currency EUR \
      -reference INV -method pm_card_visa [-capture automatic|manual] \
      [-idempotency-key K] [-description TEXT] [-return-url URL]
  paymentsctl approve [-fail] NEXT_ACTION_URL
  paymentsctl fail NEXT_ACTION_URL
  paymentsctl get PAYMENT_ID
  paymentsctl list [-account ID] [-reference REF] [-status S,...] [-from T] [-to T] \
      [-limit N] [-cursor C] [-all]
  paymentsctl refund PAYMENT_ID -amount 3.00 [-reason R] [-idempotency-key K]
  paymentsctl capture PAYMENT_ID [-amount A] [-idempotency-key K]
  paymentsctl cancel PAYMENT_ID [-reason R] [-idempotency-key K]
  paymentsctl listen [-events payment.succeeded,refund.succeeded,...] [-forward-to URL] \
      [-addr 127.0.0.1:0]
  paymentsctl events list [-type T,...] [-payment PAYMENT_ID] [-from T] [-to T] [-after T] \
      [-limit N] [-cursor C] [-all]
  paymentsctl events get EVENT_ID
  paymentsctl events resend EVENT_ID [-endpoint ENDPOINT_ID] [-idempotency-key K]
  paymentsctl endpoints list
  paymentsctl endpoints create -url URL [-events T,...] [-description TEXT] [-idempotency-key K]
  paymentsctl endpoints delete ENDPOINT_ID
  paymentsctl stripe-webhook PAYMENT_OR_REFUND_ID [-type T] [-secret S] [-object ID]

pay -capture manual only authorizes the payment (REQUIRES_CAPTURE): capture
takes all of it (or -amount of it), cancel voids it.

A payment whose customer must authenticate (3-D Secure, such as
pm_card_threeDSecureRequired) is answered 201 REQUIRES_ACTION: pay prints
it, then "nextAction: URL" on stderr, and exits 4; -return-url is where
the customer goes back to afterwards. Open the URL in a browser, or run
approve URL: it presses Approve on the provider simulator's challenge page
(fail URL, or approve -fail URL: Fail) as a browser does, follows the
redirect to the service's return route, which settles the payment, but not
on to the merchant's page, and prints the payment (exit 0 succeeded or
authorized, 2 declined, 4 not settled yet).

list prints one page of the payments that meet every filter given, newest
first: -status takes PROCESSING, REQUIRES_CAPTURE, SUCCEEDED, DECLINED,
FAILED or CANCELED, several comma-separated; -from (included) and -to
(excluded) an RFC 3339 time or a date. Pass a page's nextCursor as -cursor
for the next one, or -all to print every page as one list. Refund reasons:
requested_by_customer, duplicate, fraudulent; cancel reasons: those and
abandoned. Without -idempotency-key a command generates one key and prints
it on stderr: run the same command with it to retry.

listen receives the tenant's webhooks here until interrupted (Ctrl-C): it
listens on -addr (default: a random port on 127.0.0.1), registers a
temporary webhook endpoint for it, prints the signing secret on stderr,
verifies every delivery's signature (Standard Webhooks), prints each
verified event as one JSON line on stdout ({"id","type","timestamp","data"};
retries and resends show up again), or forwards it with its webhook-*
headers to -forward-to, and deletes the endpoint on exit. -events keeps
some types (default: all). The server must allow plain http and loopback
destinations: WEBHOOK_ALLOW_HTTP=true and WEBHOOK_ALLOW_PRIVATE=true, the
defaults of dev mode (make run).

events list prints one page of the tenant's events, newest first, with the
filters of GET /events (-type several comma-separated, -payment its
refunds' events too), -cursor and -all as for list; events get prints one;
events resend sends one again now, to every enabled endpoint subscribed to
its type or to -endpoint only, and prints the receipt (the endpoints).

endpoints manages the tenant's webhook endpoints: list (without their
secrets), create (prints the endpoint with its signing secret, "whsec_...",
as the API answers it: store it, endpoints list never shows it; -events
keeps some types, default all), delete (no delivery starts afterwards).
events resend and endpoints create are idempotent, like pay.

stripe-webhook sends POST /webhooks/stripe a Stripe event about one of the
service's payments (pay_...) or refunds (re_...), signed with the endpoint
secret as Stripe signs: what Stripe would send when it settles one. -type
defaults to payment_intent.succeeded (a payment) or refund.updated (a
refund); -secret to $STRIPE_WEBHOOK_SECRET; -object is the Stripe object's
id (made up by default: the service finds its resource by the metadata and
asks Stripe, never the event, what became of it). It prints the answer.

-url and -api-key default to $PAYMENTS_URL and $PAYMENTS_API_KEY, then to
http://127.0.0.1:8080 and sk_test_demo. Exit status: 0 done (200, 201),
2 declined (402), 3 still processing after the last attempt (202), 4 the
customer must authenticate (201 REQUIRES_ACTION), 1 any other error.
`

// command runs one subcommand and returns the exit status.
type command func(ctx context.Context, c *client.Client, args []string, out *output) int

// run runs paymentsctl with args (without the program name) and returns
// its exit status.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	out := &output{stdout: stdout, stderr: stderr}
	global := flag.NewFlagSet("paymentsctl", flag.ContinueOnError)
	global.SetOutput(io.Discard)
	baseURL := global.String("url", firstOf(getenv("PAYMENTS_URL"), devURL), "the API's base URL")
	apiKey := global.String("api-key", firstOf(getenv("PAYMENTS_API_KEY"), devAPIKey), "the tenant's secret")
	if err := global.Parse(args); err != nil {
		return out.usage(err)
	}
	commands := map[string]command{"pay": pay, "get": get, "list": list, "refund": refund, "capture": capture, "cancel": cancel, "listen": listen,
		"approve": challenge("approve"), "fail": challenge("fail"),
		"events": events(), "endpoints": endpoints(),
		"stripe-webhook": func(ctx context.Context, _ *client.Client, args []string, out *output) int {
			return stripeWebhook(ctx, *baseURL, getenv, args, out)
		}}
	name := global.Arg(0)
	cmd, ok := commands[name]
	if !ok {
		if name == "" {
			return out.usage(errors.New("no command"))
		}
		return out.usage(fmt.Errorf("unknown command %q", name))
	}
	c, err := client.New(client.Config{BaseURL: *baseURL, APIKey: *apiKey, PreferWait: preferWait, UserAgent: "paymentsctl"})
	if err != nil {
		out.errorf("%v", err)
		return exitError
	}
	return cmd(ctx, c, global.Args()[1:], out)
}

// subcommandFlags returns the flag set of a subcommand.
func subcommandFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// parseWithID parses a subcommand's args that take one id, before or after
// the flags.
func parseWithID(fs *flag.FlagSet, args []string, what string) (string, error) {
	var id string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		id, args = args[0], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		return "", err
	}
	if id == "" && fs.NArg() > 0 {
		id = fs.Arg(0)
		if err := fs.Parse(fs.Args()[1:]); err != nil {
			return "", err
		}
	}
	switch {
	case id == "":
		return "", fmt.Errorf("%s needs a %s", fs.Name(), what)
	case fs.NArg() > 0:
		return "", fmt.Errorf("%s: unexpected %q", fs.Name(), fs.Arg(0))
	}
	return id, nil
}

// noArgs fails when a subcommand got arguments besides its flags.
func noArgs(fs *flag.FlagSet) error {
	if fs.NArg() > 0 {
		return fmt.Errorf("%s: unexpected %q", fs.Name(), fs.Arg(0))
	}
	return nil
}

func firstOf(values ...string) string {
	for _, v := range values {
		if v != "" {
			return v
		}
	}
	return ""
}

// output writes what a command tells.
type output struct {
	stdout, stderr io.Writer
}

// resource prints v as indented JSON on stdout.
func (o *output) resource(v any) int {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		o.errorf("encode the answer: %v", err)
		return exitError
	}
	_, _ = fmt.Fprintf(o.stdout, "%s\n", b)
	return exitOK
}

func (o *output) errorf(format string, args ...any) {
	_, _ = fmt.Fprintf(o.stderr, "paymentsctl: "+format+"\n", args...)
}

func (o *output) usage(err error) int {
	if !errors.Is(err, flag.ErrHelp) {
		o.errorf("%v", err)
	}
	_, _ = io.WriteString(o.stderr, usage)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	return exitError
}

// idempotent returns the call option of an idempotent command's key: key,
// or, when it is empty, a new one, told on stderr so that the command can
// be retried with it.
func (o *output) idempotent(key string) client.CallOption {
	if key == "" {
		key = client.NewIdempotencyKey()
		_, _ = fmt.Fprintf(o.stderr, "idempotency-key: %s\n", key)
	}
	return client.WithIdempotencyKey(key)
}

// failure prints err (the problem's code and detail when it is one) and
// returns the exit status it means.
func (o *output) failure(err error) int {
	var p *client.Error
	if !errors.As(err, &p) {
		o.errorf("%v", err)
		return exitError
	}
	if p.Code != "" {
		o.errorf("%s: %s", p.Code, p.Detail)
	} else {
		o.errorf("HTTP %d: %s", p.Status, p.Detail)
	}
	for _, m := range []struct{ name, value string }{
		{"paymentId", p.PaymentID}, {"refundId", p.RefundID}, {"captureId", p.CaptureID},
		{"cancellationId", p.CancellationID}, {"declineCode", p.DeclineCode},
		{"refundableAmount", p.RefundableAmount}, {"capturableAmount", p.CapturableAmount},
		{"endpointId", p.EndpointID}, {"rotationId", p.RotationID}, {"resendId", p.ResendID},
		{"requestId", p.RequestID},
	} {
		if m.value != "" {
			_, _ = fmt.Fprintf(o.stderr, "  %s: %s\n", m.name, m.value)
		}
	}
	for _, f := range p.Errors {
		_, _ = fmt.Fprintf(o.stderr, "  %s: %s\n", f.Field, f.Message)
	}
	var declined *client.DeclinedError
	if errors.As(err, &declined) {
		return exitDeclined
	}
	return exitError
}

// created prints the outcome of an idempotent command (pay, refund,
// capture, cancel): the resource, and a note when it is still processing.
func (o *output) created(v any, out client.Outcome) int {
	if code := o.resource(v); code != exitOK {
		return code
	}
	if !out.StillProcessing() {
		return exitOK
	}
	o.errorf("still processing after %d attempts: the outcome is not known yet; run the command again with -idempotency-key %s to learn it",
		out.Attempts, out.IdempotencyKey)
	return exitProcessing
}
