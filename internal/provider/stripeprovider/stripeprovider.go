// Package stripeprovider implements provider.Provider with Stripe
// PaymentIntents and Refunds, through stripe-go v76: charges (captured at
// once, or authorized with capture_method=manual, then captured or
// canceled; either may first wait for the customer to authenticate) and
// refunds.
//
// Each Provider has its own stripe-go backend (base URL, HTTP client, no
// network retries of its own, a log/slog logger) and its own API key; the
// package never touches stripe.Key or stripe-go's global backends.
//
// # Charge
//
// Charge creates and confirms a PaymentIntent in one request: amount (in
// Stripe's unit for the currency, see "Amounts" below), currency (lower
// case), payment_method, confirm=true,
// automatic_payment_methods[enabled]=true, description,
// metadata[idempotency_key] and (when set) metadata[payment_id], and
// capture_method=manual when the request asks for CaptureManual, with the
// request's key in the Idempotency-Key header. A request with a ReturnURL
// also sends it as return_url, with
// automatic_payment_methods[allow_redirects]=always: a card that needs 3-D
// Secure then answers requires_action with next_action.redirect_to_url,
// the customer's way to the challenge, which sends them back to
// return_url. A request without one sends
// automatic_payment_methods[allow_redirects]=never, so that confirmation
// never waits for a redirect (Stripe refuses a payment method that would
// need one). The parameters are a function of the ChargeRequest alone, so
// sending the same request again is, to Stripe's idempotency layer, the
// same request: for at least 24 hours Stripe answers it with the stored
// answer of the first one (a 409 while the first is still executing)
// instead of charging again. (A resend whose ReturnURL changed, after the
// service's PUBLIC_URL did, is a 400 idempotency_error: an *APIError, which
// the caller settles by Lookup.)
//
// The error a call returns tells the caller whether money may have moved:
//
//   - 200 with a PaymentIntent that succeeded: provider.StatusSucceeded, and
//     the Charge's ID is the PaymentIntent id; AmountCapturedMinor is its
//     amount_received (a succeeded PaymentIntent that received nothing is
//     not an answer Stripe gives: provider.ErrUnknownOutcome).
//   - 200 with a PaymentIntent in requires_capture (made with
//     capture_method=manual): provider.StatusAuthorized. The funds are
//     held; Capture or Void moves it on.
//   - A card_error answer (HTTP 402: the attempt was declined), or a
//     PaymentIntent back in requires_payment_method with a
//     last_payment_error: provider.StatusDeclined with a nil error;
//     DeclineCode is the error's decline_code, else its code, else
//     "payment_intent_payment_attempt_failed" ("authentication_failed" for
//     the code payment_intent_authentication_failure, whatever else it
//     says). A canceled PaymentIntent is declined too, with DeclineCode
//     "canceled": Stripe moves no money for it, ever; one made with
//     capture_method=manual is provider.StatusCanceled instead (an
//     authorization voided, by Void or by Stripe's expiry of it).
//   - A PaymentIntent in requires_action: provider.StatusRequiresAction
//     with a nil error. It waits for the customer to authenticate; Stripe
//     moves no money until then. When next_action.type is redirect_to_url,
//     NextActionURL is next_action.redirect_to_url.url (an absolute http or
//     https URL, else none). Any other next action (use_stripe_sdk, a
//     voucher or a QR code to show) leaves NextActionURL empty: the service
//     cannot take the customer there, and the charge is canceled (Void)
//     once the customer's time runs out. After the authentication the
//     PaymentIntent is succeeded, requires_capture, or back in
//     requires_payment_method with a failed attempt (declined; Stripe's
//     payment_intent_authentication_failure is DeclineCode
//     "authentication_failed"); Lookup tells which.
//   - A PaymentIntent in processing, requires_confirmation,
//     requires_payment_method without a failed attempt, or any other
//     status: provider.ErrUnknownOutcome. Money may still move: processing
//     settles later. Lookup tells later.
//   - The request was never sent: the dial failed (refused, unreachable, no
//     such host) and no connection was obtained at any point of the call,
//     or the context was done before the call: provider.ErrUnavailable.
//   - HTTP 429 (rate limited, or lock_timeout) answering the only copy of
//     the request that could have reached Stripe: provider.ErrUnavailable.
//     Stripe did not process the request. A 429 answering a copy that
//     net/http resent (see below) is provider.ErrUnknownOutcome: the first
//     copy may have been processed.
//   - HTTP 409 (idempotency_key_in_use: a request with the same key is still
//     executing at Stripe): provider.ErrUnknownOutcome, since that other
//     request may move the money.
//   - Any 5xx, 503 included: provider.ErrUnknownOutcome. Stripe documents
//     that a 500 may or may not have been processed, and its idempotency
//     layer stores a 500 like any answer and replays it for that key, so
//     sending again will not tell; Lookup will.
//   - Every other failure after a connection was obtained: a timeout, the
//     context's deadline or cancellation, EOF, a reset connection, a body
//     that stopped half way, a 2xx or 3xx answer that is not a
//     PaymentIntent: provider.ErrUnknownOutcome.
//   - Any other 4xx (400 invalid_request_error; 400 idempotency_error,
//     which means the key was used before with other parameters; 401, 403,
//     404, or a 4xx that is not a Stripe error at all, such as a wrong base
//     URL): an *APIError, which is neither sentinel. Stripe rejected the
//     request; sending it again unchanged will not help.
//   - An invalid ChargeRequest: a plain error, and nothing is sent. So is
//     an amount Stripe would refuse (a *provider.Refusal, see "Amounts").
//
// Neither a dial error nor a refusal alone is taken as proof that nothing
// was processed: net/http resends a request that carries an Idempotency-Key
// header on a new connection when a reused keep-alive connection fails,
// possibly after Stripe received the first copy. The Provider therefore
// watches the call with net/http/httptrace, and says ErrUnavailable for a
// dial error only when no connection was ever obtained, and for a 429 only
// when one connection carried the call.
//
// Sentinels are wrapped together with the underlying error, so
// errors.Is(err, context.DeadlineExceeded) works, and so does errors.As with
// an *APIError or a *stripe.Error target for an error answer. The caller bounds each call with
// its context (passed to stripe-go as Params.Context); the Provider adds no
// timeout of its own, and stripe-go's network retries are off, so one call is
// one request. Error texts never include stripe-go's own error text, which
// carries a PaymentIntent's client_secret.
//
// # Amounts
//
// The service counts amounts in ISO 4217 minor units; Stripe counts some
// currencies otherwise, and refuses some amounts (units.Stripe: ISK is a
// two-decimal currency in Stripe's API, in whole kronur only; BHD, JOD,
// KWD, OMR and TND amounts must end in 0). Every amount sent (a charge's
// amount, a capture's amount_to_capture, a refund's amount) is converted to
// Stripe's unit, and one Stripe would refuse is never sent: the call
// returns an error wrapping a *provider.Refusal, and Check (the
// provider.Checker the operations ask before they store anything) refuses
// it the same way. Every amount read (a PaymentIntent's amount and
// amount_received, a Refund's amount, in answers, lookups and listings) is
// converted back; one that is no whole number of the service's minor
// units is an error wrapping provider.ErrAmbiguous.
//
// # Lookup
//
// Stripe has no lookup by idempotency key. Lookup lists the PaymentIntents
// created since the lookup's NotBefore (GET
// /v1/payment_intents?created[gte]=UNIX&limit=100, NotBefore rounded down to
// the second as Stripe dates objects, then the next pages with
// starting_after=<the last id read>, at most 20 pages), keeps those whose
// metadata carries exactly the key (compared here, byte for byte, not by
// Stripe), and maps the one it finds as Charge maps its answer: a listed
// PaymentIntent is as current as a retrieve, so none is made. Should more
// than one PaymentIntent carry the key (Stripe forgot the key after 24 hours
// and someone charged again), money may have moved twice: Lookup logs a
// warning and returns an error wrapping provider.ErrAmbiguous that names
// them. Only a person can sort that out. A ChargeLookup without a NotBefore
// (or one before 1970) is a plain error, and nothing is sent: the caller must
// say when the payment was created, less a margin for clock skew.
//
// Lookup lists rather than searches because listing is read-after-write:
// Stripe documents that the Search API trails writes by about a minute, and
// more during an incident, and points read-after-write flows to the list
// endpoints. So LookupLag is zero, and Lookup returns provider.ErrNotFound
// when every answer was HTTP 200 with a well-formed list, the last saying it
// has no more, and no PaymentIntent in them carries the key. A failed,
// partial or unreadable listing (an answer that is not a list, an entry
// without an id, a page that says there are more but lists none, more pages
// than Lookup reads) is never ErrNotFound. The cost is that Lookup reads
// every PaymentIntent of the account created since NotBefore, which grows
// with the payment's age and the account's traffic: past 2,000 of them (or
// the caller's deadline) the answer is provider.ErrUnknownOutcome, never
// ErrNotFound.
//
// ErrNotFound speaks of the requests that reached Stripe before the listing;
// one still under way is the caller's to wait for. Sending the charge again
// after ErrNotFound is safe with the same idempotency key within Stripe's
// key window (at least 24 hours from the first request), which is why
// package config refuses a PROVIDER_KEY_TTL longer than 24h with
// PROVIDER=stripe.
//
// # Refund
//
// Refund creates a Refund (POST /v1/refunds) with payment_intent (the
// request's ChargeID, a PaymentIntent id as Charge returns it), amount,
// reason (when set), metadata[idempotency_key] and (when set)
// metadata[refund_id], with the request's key in the Idempotency-Key header.
// The currency is not sent: Stripe refunds in the PaymentIntent's currency,
// and the Refund's Currency says which it was (a warning is logged when it is
// not the request's). Stripe's idempotency layer treats a resend as for
// charges. Errors are classified as for Charge, except that:
//
//   - A Refund in succeeded: provider.StatusSucceeded. In failed or
//     canceled: provider.StatusDeclined, DeclineCode its failure_reason,
//     else its status. In pending or requires_action:
//     provider.StatusPending with a nil error; not final, look it up later.
//     Any other status, or a Refund of another PaymentIntent:
//     provider.ErrUnknownOutcome.
//   - A 400 or 402 that refuses a refund the charge cannot take (codes
//     amount_too_large, charge_already_refunded, charge_disputed,
//     charge_not_refundable, refund_disputed_payment, or a card_error):
//     provider.StatusDeclined with a nil error, DeclineCode the error's
//     decline_code, else its code, else "refund_declined", and an empty ID:
//     Stripe made no Refund.
//     Every other 4xx is an *APIError, as for Charge.
//
// # LookupRefund
//
// Stripe has no refund search and no lookup by idempotency key, so
// LookupRefund lists the refunds of the PaymentIntent (GET
// /v1/refunds?payment_intent=ID, 100 a page, at most 10 pages) and keeps
// those whose metadata carries exactly the key. Listing is read-after-write
// (LookupLag is zero for refunds too), so an answer that lists every refund
// of the PaymentIntent and none with the key is provider.ErrNotFound. Two or
// more with the key is an error wrapping provider.ErrAmbiguous, naming them
// (and a warning is logged). One is mapped as Refund maps its answer. A failed, partial or
// unreadable listing (an answer that is not a list, more pages than it
// reads) is never ErrNotFound. The RefundLookup must name the charge: without
// it LookupRefund returns a plain error and sends nothing.
//
// # Capture, Void and GetCharge
//
// Capture captures the PaymentIntent req.ChargeID (POST
// /v1/payment_intents/{id}/capture) with amount_to_capture, the request's
// key in the Idempotency-Key header; Stripe releases the rest of the
// authorization. Void cancels it (POST /v1/payment_intents/{id}/cancel)
// with cancellation_reason (when set: requested_by_customer, duplicate,
// fraudulent or abandoned, Stripe's own names) and the request's key: an
// authorized PaymentIntent, or one still waiting for its customer to
// authenticate (requires_action, whatever its capture method), which
// Stripe cancels alike. Should the customer authenticate first, the void
// is refused if the PaymentIntent succeeded (as below), and releases the
// authorization if it is requires_capture.
// Neither sends metadata: the PaymentIntent carries the payment's already,
// and Stripe's idempotency layer, not a lookup, resolves a resend. GetCharge
// retrieves it (GET /v1/payment_intents/{id}), which is read-after-write.
// Each returns the PaymentIntent mapped as Charge maps it (its
// IdempotencyKey the one in its metadata), with these verdicts:
//
//   - Capture answered 200 with a succeeded PaymentIntent:
//     provider.StatusSucceeded, AmountCapturedMinor its amount_received.
//     Void answered 200 with a canceled one: provider.StatusCanceled.
//     Another status, or another PaymentIntent, in a 200:
//     provider.ErrUnknownOutcome.
//   - A 400 or 402 that refuses the capture: provider.StatusDeclined with
//     a nil error. A card_error: DeclineCode its decline_code, else its
//     code. payment_intent_unexpected_state: charge_canceled when the
//     PaymentIntent in the error is canceled, charge_already_captured when
//     it succeeded, else the code itself. amount_too_large,
//     charge_expired_for_capture, capture_charge_authorization_expired and
//     capture_unauthorized_payment: that code.
//   - A 400 payment_intent_unexpected_state that refuses the void:
//     provider.StatusDeclined with charge_already_captured when the
//     PaymentIntent in the error succeeded, provider.StatusCanceled (a nil
//     error: it was voided already) when it is canceled, else declined with
//     the code itself.
//   - GetCharge of a PaymentIntent Stripe does not hold (404
//     resource_missing): provider.ErrNotFound. A 404 that is not a Stripe
//     error object (a wrong base URL) is an *APIError, never ErrNotFound.
//   - Every other answer and failure is classified as for Charge.
package stripeprovider

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	stripe "github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/paymentintent"
	"github.com/stripe/stripe-go/v76/refund"

	"github.com/paymentsapi/paymentsapi/internal/provider"
	"github.com/paymentsapi/paymentsapi/internal/provider/units"
)

// Metadata keys set on every PaymentIntent that Charge creates.
const (
	MetadataIdempotencyKey = "idempotency_key"
	MetadataPaymentID      = "payment_id"
)

// Lookup reads the PaymentIntents created since ChargeLookup.NotBefore
// intentPageSize at a time, at most maxIntentPages pages: each page is a
// request, and about this many fit in a provider call's usual few seconds.
const (
	intentPageSize = 100
	maxIntentPages = 20
)

// maxKeyLen is Stripe's limit on an Idempotency-Key.
const maxKeyLen = 255

// Config configures a Provider.
type Config struct {
	// APIKey is the Stripe secret key (sk_test_... or sk_live_...).
	APIKey string
	// BaseURL is the API's base URL, such as "http://127.0.0.1:12111" for
	// stripe-mock; empty means Stripe's default, https://api.stripe.com.
	BaseURL string
	// HTTPClient sends the requests; nil means a client on
	// http.DefaultTransport with no timeout of its own. The Provider uses a
	// copy whose Transport is wrapped to observe each call.
	HTTPClient *http.Client
	// Logger receives stripe-go's log lines and the Provider's warnings;
	// nil means slog.Default().
	Logger *slog.Logger
}

// Provider charges with Stripe PaymentIntents and refunds them with Stripe
// Refunds. It is safe for concurrent use.
type Provider struct {
	intents paymentintent.Client
	refunds refund.Client
	rules   units.Rules // Stripe's currency rules: the unit of every amount sent and read
	log     *slog.Logger
}

var (
	_ provider.Provider = (*Provider)(nil)
	_ provider.Checker  = (*Provider)(nil)
)

// New returns a Provider for cfg.
func New(cfg Config) (*Provider, error) {
	if cfg.APIKey == "" {
		return nil, errors.New("stripeprovider: empty API key")
	}
	bc := &stripe.BackendConfig{
		MaxNetworkRetries: stripe.Int64(0),
		EnableTelemetry:   stripe.Bool(false),
	}
	if cfg.BaseURL != "" {
		u, err := url.Parse(cfg.BaseURL)
		if err != nil {
			return nil, fmt.Errorf("stripeprovider: base URL: %w", err)
		}
		if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("stripeprovider: base URL %q: want http(s)://host[:port]", cfg.BaseURL)
		}
		bc.URL = stripe.String(cfg.BaseURL)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	var hc http.Client
	if cfg.HTTPClient != nil {
		hc = *cfg.HTTPClient
	}
	next := hc.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	hc.Transport = &observingTransport{next: next}
	bc.HTTPClient = &hc
	bc.LeveledLogger = leveledLogger{log: log.With("library", "stripe-go")} // "component" is the caller's (stripe)
	b := stripe.GetBackendWithConfig(stripe.APIBackend, bc)
	return &Provider{
		intents: paymentintent.Client{B: b, Key: cfg.APIKey},
		refunds: refund.Client{B: b, Key: cfg.APIKey},
		rules:   units.Stripe(),
		log:     log,
	}, nil
}

// Check refuses, with a *provider.Refusal, an amount Stripe's currency
// rules refuse (see "Amounts" in the package documentation). Stripe
// decides about payment methods itself.
func (p *Provider) Check(prop provider.Proposal) error {
	_, err := p.rules.ToProvider(prop.AmountMinor, prop.Currency)
	return err
}

// Charge creates and confirms a PaymentIntent with req.IdempotencyKey, or
// gets Stripe's stored answer for that key. See the package documentation
// for errors.
func (p *Provider) Charge(ctx context.Context, req provider.ChargeRequest) (provider.Charge, error) {
	if err := checkChargeRequest(req); err != nil {
		return provider.Charge{}, fmt.Errorf("stripeprovider: charge: %w", err)
	}
	amount, err := p.rules.ToProvider(req.AmountMinor, req.Currency)
	if err != nil {
		return provider.Charge{}, fmt.Errorf("stripeprovider: charge with key %q: not sent: %w", req.IdempotencyKey, err)
	}
	if err := ctx.Err(); err != nil {
		return provider.Charge{}, fmt.Errorf("stripeprovider: charge with key %q: %w: not sent: %w", req.IdempotencyKey, provider.ErrUnavailable, err)
	}
	ctx, trace := withCallTrace(ctx)
	params := &stripe.PaymentIntentParams{
		Amount:        stripe.Int64(amount),
		Currency:      stripe.String(strings.ToLower(req.Currency)),
		PaymentMethod: stripe.String(req.PaymentMethod),
		Confirm:       stripe.Bool(true),
		AutomaticPaymentMethods: &stripe.PaymentIntentAutomaticPaymentMethodsParams{
			Enabled:        stripe.Bool(true),
			AllowRedirects: stripe.String("never"),
		},
		Metadata: map[string]string{MetadataIdempotencyKey: req.IdempotencyKey},
	}
	if req.PaymentID != "" {
		params.Metadata[MetadataPaymentID] = req.PaymentID
	}
	if req.Description != "" {
		params.Description = stripe.String(req.Description)
	}
	if req.CaptureManual {
		params.CaptureMethod = stripe.String(string(stripe.PaymentIntentCaptureMethodManual))
	}
	if req.ReturnURL != "" {
		// With somewhere to send the customer back to, the service can
		// follow a redirect: Stripe then answers a card that needs 3-D
		// Secure with next_action.redirect_to_url rather than
		// use_stripe_sdk (which needs Stripe.js and the client secret,
		// neither of which the service hands out). allow_redirects=always
		// is what Stripe asks for alongside a return_url, and the
		// redirect-based payment methods it admits end the same way.
		params.ReturnURL = stripe.String(req.ReturnURL)
		params.AutomaticPaymentMethods.AllowRedirects = stripe.String("always")
	}
	params.Context = ctx
	params.IdempotencyKey = stripe.String(req.IdempotencyKey)

	pi, err := p.intents.New(params)
	if err != nil {
		var se *stripe.Error
		if errors.As(err, &se) && se.Type == stripe.ErrorTypeCard {
			return p.declinedByError(se, req), nil
		}
		return provider.Charge{}, fmt.Errorf("stripeprovider: charge with key %q: %w", req.IdempotencyKey, classify(err, trace))
	}
	ch, err := p.chargeFromIntent(pi, req.IdempotencyKey)
	if err != nil {
		return provider.Charge{}, fmt.Errorf("stripeprovider: charge with key %q: %w", req.IdempotencyKey, err)
	}
	return ch, nil
}

// Lookup lists the PaymentIntents created since l.NotBefore and returns the
// one whose metadata carries l.IdempotencyKey. See the package documentation
// for what it sends and for errors.
func (p *Provider) Lookup(ctx context.Context, l provider.ChargeLookup) (provider.Charge, error) {
	key := l.IdempotencyKey
	if err := checkKey(key); err != nil {
		return provider.Charge{}, fmt.Errorf("stripeprovider: lookup: %w", err)
	}
	if l.NotBefore.Unix() <= 0 {
		return provider.Charge{}, fmt.Errorf("stripeprovider: lookup of key %q: Stripe lists PaymentIntents by creation time, and NotBefore (%v) is not a time after 1970", key, l.NotBefore)
	}
	if err := ctx.Err(); err != nil {
		return provider.Charge{}, fmt.Errorf("stripeprovider: lookup of key %q: %w: not sent: %w", key, provider.ErrUnavailable, err)
	}
	found, err := p.intentsWithKey(ctx, l)
	if err != nil {
		return provider.Charge{}, fmt.Errorf("stripeprovider: lookup of key %q: list the PaymentIntents created since %s: %w", key, since(l), err)
	}
	switch len(found) {
	case 0:
		return provider.Charge{}, fmt.Errorf("stripeprovider: lookup of key %q: no PaymentIntent created since %s carries the key: %w", key, since(l), provider.ErrNotFound)
	case 1:
		ch, err := p.chargeFromIntent(found[0], key)
		if err != nil {
			return provider.Charge{}, fmt.Errorf("stripeprovider: lookup of key %q: %w", key, err)
		}
		return ch, nil
	}
	ids := make([]string, len(found))
	for i, pi := range found {
		ids[i] = pi.ID
	}
	p.log.WarnContext(ctx, "several Stripe PaymentIntents carry one idempotency key", "idempotency_key", key, "payment_intents", ids)
	return provider.Charge{}, fmt.Errorf("stripeprovider: lookup of key %q: %w: PaymentIntents %s", key, provider.ErrAmbiguous, strings.Join(ids, ", "))
}

// LookupLag is zero: Lookup and LookupRefund list, and Stripe's list
// endpoints are read-after-write. See the package documentation.
func (p *Provider) LookupLag() time.Duration { return 0 }

// since renders l.NotBefore as the created[gte] that Lookup sends.
func since(l provider.ChargeLookup) string {
	return time.Unix(l.NotBefore.Unix(), 0).UTC().Format(time.RFC3339)
}

// intentsWithKey lists every PaymentIntent created since l.NotBefore (to the
// second, rounded down, as Stripe dates them), page by page, and returns
// those whose metadata carries l.IdempotencyKey.
func (p *Provider) intentsWithKey(ctx context.Context, l provider.ChargeLookup) ([]*stripe.PaymentIntent, error) {
	var found []*stripe.PaymentIntent
	err := readPages(ctx, "PaymentIntents", maxIntentPages, intentPageSize, p.intentPages(l.NotBefore), func(entry any) (string, error) {
		pi, _ := entry.(*stripe.PaymentIntent)
		if pi == nil {
			return "", nil
		}
		if pi.Metadata[MetadataIdempotencyKey] == l.IdempotencyKey {
			found = append(found, pi)
		}
		return pi.ID, nil
	})
	if err != nil {
		return nil, err
	}
	return found, nil
}

// checkListAnswer accepts a list answer only if it says it is an object of
// that kind ("list") with a data array, so that an empty answer from
// something else (a proxy answering 200 {}) never reads as "nothing there".
func checkListAnswer(resp *stripe.APIResponse, object string) error {
	if resp == nil {
		return fmt.Errorf("%w: no %s answer", provider.ErrUnknownOutcome, object)
	}
	var head struct {
		Object string          `json:"object"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(resp.RawJSON, &head); err != nil || head.Object != object || !bytes.HasPrefix(head.Data, []byte("[")) {
		return fmt.Errorf("%w: HTTP %d answer is not a %s", provider.ErrUnknownOutcome, resp.StatusCode, object)
	}
	return nil
}

// chargeFromIntent maps a PaymentIntent to a Charge, or to
// ErrUnknownOutcome when money may still move (ErrAmbiguous when its
// amounts are no whole numbers of the service's unit).
func (p *Provider) chargeFromIntent(pi *stripe.PaymentIntent, key string) (provider.Charge, error) {
	if pi == nil || pi.ID == "" || pi.Object != "payment_intent" {
		return provider.Charge{}, fmt.Errorf("%w: the answer is not a PaymentIntent", provider.ErrUnknownOutcome)
	}
	ch, err := p.intentAmounts(pi)
	if err != nil {
		return provider.Charge{}, err
	}
	ch.ID, ch.IdempotencyKey = pi.ID, key
	switch pi.Status {
	case stripe.PaymentIntentStatusSucceeded:
		if pi.AmountReceived <= 0 {
			return provider.Charge{}, fmt.Errorf("%w: PaymentIntent %s succeeded but received %d", provider.ErrUnknownOutcome, pi.ID, pi.AmountReceived)
		}
		ch.Status = provider.StatusSucceeded
	case stripe.PaymentIntentStatusRequiresCapture:
		ch.Status = provider.StatusAuthorized
	case stripe.PaymentIntentStatusRequiresPaymentMethod:
		if pi.LastPaymentError == nil {
			return provider.Charge{}, fmt.Errorf("%w: PaymentIntent %s is %q but records no failed attempt", provider.ErrUnknownOutcome, pi.ID, pi.Status)
		}
		ch.Status, ch.DeclineCode = provider.StatusDeclined, declineCode(pi.LastPaymentError)
	case stripe.PaymentIntentStatusRequiresAction:
		// The charge waits for its customer, whatever the next action:
		// Stripe moves no money until the customer acts, and a
		// Captures.Void cancels it. Only a redirect gives the customer
		// somewhere to go (NextActionURL). Any other action (use_stripe_sdk,
		// a voucher or a QR code to show) is one no customer of this
		// service can take, since the service hands out neither the client
		// secret nor the action's details: it stays requires_action with
		// no URL, so the payment waits without a nextAction and is canceled
		// after AUTHENTICATION_TIMEOUT like one whose customer never came
		// back. As an unknown outcome it would never end: Stripe may never
		// move such a PaymentIntent on by itself, and a payment that
		// waits is canceled only after a lookup that answers.
		ch.Status, ch.NextActionURL = provider.StatusRequiresAction, redirectURL(pi.NextAction)
	case stripe.PaymentIntentStatusCanceled:
		if pi.CaptureMethod == stripe.PaymentIntentCaptureMethodManual {
			ch.Status = provider.StatusCanceled
		} else {
			ch.Status, ch.DeclineCode = provider.StatusDeclined, "canceled"
		}
	default:
		return provider.Charge{}, fmt.Errorf("%w: PaymentIntent %s is %q: money may still move", provider.ErrUnknownOutcome, pi.ID, pi.Status)
	}
	if ch.Status != provider.StatusSucceeded {
		ch.AmountCapturedMinor = 0 // received nothing yet, or nothing for good
	}
	return ch, nil
}

// redirectURL is where next sends the customer when it is a redirect
// (next_action.type redirect_to_url) to an absolute http(s) URL; "" for
// every other action, and for a redirect whose URL a browser could not
// follow.
func redirectURL(next *stripe.PaymentIntentNextAction) string {
	if next == nil || next.Type != stripe.PaymentIntentNextActionTypeRedirectToURL || next.RedirectToURL == nil {
		return ""
	}
	u, err := url.Parse(next.RedirectToURL.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return ""
	}
	return next.RedirectToURL.URL
}

// intentAmounts is a Charge of pi's currency with its amount and the
// amount it received (AmountCapturedMinor), in the service's unit.
func (p *Provider) intentAmounts(pi *stripe.PaymentIntent) (provider.Charge, error) {
	ch := provider.Charge{Currency: strings.ToUpper(string(pi.Currency))}
	if err := p.rules.ReadCharge(&ch, pi.Amount, pi.AmountReceived); err != nil {
		return provider.Charge{}, fmt.Errorf("PaymentIntent %s: %w", pi.ID, err)
	}
	return ch, nil
}

// declinedByError maps a card_error answer to a declined Charge: of the
// PaymentIntent it carries, when its amount reads in the service's unit,
// else of the request.
func (p *Provider) declinedByError(se *stripe.Error, req provider.ChargeRequest) provider.Charge {
	ch := provider.Charge{
		IdempotencyKey: req.IdempotencyKey,
		Status:         provider.StatusDeclined,
		DeclineCode:    declineCode(se),
		AmountMinor:    req.AmountMinor,
		Currency:       strings.ToUpper(req.Currency),
	}
	if pi := se.PaymentIntent; pi != nil {
		ch.ID = pi.ID
		if pi.Amount != 0 && pi.Currency != "" {
			if amounts, err := p.intentAmounts(pi); err == nil {
				ch.AmountMinor, ch.Currency = amounts.AmountMinor, amounts.Currency
			}
		}
	}
	return ch
}

// declineAuthenticationFailed is the decline code of a charge whose
// customer failed the authentication (3-D Secure): the word the service
// and the simulator use for it, for Stripe's
// payment_intent_authentication_failure.
const declineAuthenticationFailed = "authentication_failed"

// declineCode is the most specific reason a failed attempt gives.
func declineCode(e *stripe.Error) string {
	switch {
	case e.Code == stripe.ErrorCodePaymentIntentAuthenticationFailure:
		return declineAuthenticationFailed
	case e.DeclineCode != "":
		return string(e.DeclineCode)
	case e.Code != "":
		return string(e.Code)
	default:
		return string(stripe.ErrorCodePaymentIntentPaymentAttemptFailed)
	}
}

func checkChargeRequest(req provider.ChargeRequest) error {
	if err := checkKey(req.IdempotencyKey); err != nil {
		return err
	}
	switch {
	case req.AmountMinor <= 0:
		return fmt.Errorf("amount %d: want a positive amount in minor units", req.AmountMinor)
	case len(req.Currency) != 3:
		return fmt.Errorf("currency %q: want an ISO 4217 code", req.Currency)
	case req.PaymentMethod == "":
		return errors.New("empty payment method")
	}
	return nil
}

// checkKey refuses keys that Stripe or stripe-go would not carry unchanged:
// stripe-go trims the Idempotency-Key header, which would then differ from
// the metadata that Lookup matches.
func checkKey(key string) error {
	switch {
	case key == "":
		return errors.New("empty idempotency key")
	case len(key) > maxKeyLen:
		return fmt.Errorf("idempotency key of %d bytes: Stripe takes at most %d", len(key), maxKeyLen)
	case strings.TrimSpace(key) != key:
		return fmt.Errorf("idempotency key %q has surrounding white space", key)
	}
	return nil
}
