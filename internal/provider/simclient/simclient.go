// Package simclient implements provider.Provider against the HTTP API of the
// provider simulator (package sim, binary providersim).
//
// The error a call returns tells the caller whether money may have moved.
// Charge, Refund, Capture and Void map outcomes as follows:
//
//   - 200 with a well-formed charge, refund, capture or void: it, with a
//     nil error (a decline is a charge, refund, capture or void with
//     provider.StatusDeclined).
//   - The connection could not be made (a *net.OpError with Op "dial":
//     refused, unreachable, no such host), and no connection was obtained
//     at any point of the call, so the request was never sent:
//     provider.ErrUnavailable.
//   - 503 answering the only copy of the request that was sent:
//     provider.ErrUnavailable (the provider refused before processing).
//     A 503 answering a copy that net/http resent on a new connection (see
//     below) proves nothing about the first copy: provider.ErrUnknownOutcome.
//   - Any other failure after the request may have been sent: the context's
//     deadline or cancellation, a timeout, a reset or closed connection, EOF
//     before or during the response, any 5xx other than 503, an unexpected
//     status outside 2xx and 4xx, an unreadable or malformed body (a status
//     the answer cannot have, another key, for a refund, capture or void
//     another charge): provider.ErrUnknownOutcome. Money may have moved;
//     find out with Lookup, LookupRefund or GetCharge.
//   - 4xx (422 idempotency_key_reused, 400 invalid request, 404
//     charge_not_found for a refund, capture or void of a charge the
//     simulator does not hold, ...): an *APIError, which is neither
//     sentinel. The provider rejected the request; retrying it unchanged
//     will not help.
//
// Lookup, LookupRefund and GetCharge map the same way, except that:
//
//   - 404 whose body is the simulator's {"error":"not_found"}:
//     provider.ErrNotFound. A 404 without that body (a wrong base URL, a
//     proxy page) is an *APIError, never ErrNotFound, because ErrNotFound
//     claims certainty that the key was never used.
//   - Every other failure is not ErrNotFound: 503 and dial failures wrap
//     ErrUnavailable, timeouts and the rest wrap ErrUnknownOutcome.
//
// The simulator looks charges and refunds up by key in the memory it writes
// them to: a lookup sees every create that came before it, so LookupLag is
// zero, and Lookup has no use for ChargeLookup.NotBefore (it sends only the
// key). GetCharge reads that memory too: a capture or void shows at once.
//
// Sentinels are wrapped together with the underlying error, so
// errors.Is(err, context.DeadlineExceeded) also works. The caller bounds each
// call with its context; the client adds no timeout of its own.
//
// # What the simulator takes
//
// Dial reads, once, what the simulator serves at GET /_sim/methods: its
// test payment methods and the currency rules it plays (package units: ISO
// 4217's by default, Stripe's with providersim -currency-rules stripe).
// The client then converts every amount it sends and reads with those
// rules, as the Stripe adapter does with Stripe's, and, as a
// provider.Checker, refuses before anything is stored a charge whose
// payment method is none of the simulator's (provider.RefusedPaymentMethod)
// or an amount the rules refuse (provider.RefusedAmount). A client made
// with New, or dialled to a simulator that does not serve
// /_sim/methods, checks nothing and converts nothing. An amount read that
// is no whole number of the service's minor units is an error wrapping
// provider.ErrAmbiguous.
//
// Note that net/http's Transport may itself resend a request carrying an
// Idempotency-Key header when a reused keep-alive connection fails before
// any response byte arrives. That is safe here: the simulator answers a
// resend with the stored charge or refund and counts it in requestCount.
// It is also why the client watches each call with net/http/httptrace, and
// trusts a refusal only when one connection carried the call.
package simclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/provider"
	"github.com/paymentsapi/paymentsapi/internal/provider/units"
)

// maxResponse bounds how much of a response body is read.
const maxResponse = 1 << 20

// Client talks to a provider simulator. It is safe for concurrent use.
type Client struct {
	base string
	hc   *http.Client
	// rules are the currency rules the simulator plays: the unit of every
	// amount sent and read.
	rules units.Rules
	// methods are the simulator's test payment methods, which a charge's
	// must be one of (nil: any).
	methods []string
}

var (
	_ provider.Provider = (*Client)(nil)
	_ provider.Checker  = (*Client)(nil)
)

// New returns a Client for the simulator at baseURL (such as
// "http://127.0.0.1:8081"), sending requests with hc; nil hc means a client
// on http.DefaultTransport with no timeout of its own. It checks no
// payment method, and sends and reads amounts in ISO 4217 minor units.
func New(baseURL string, hc *http.Client) *Client {
	if hc == nil {
		hc = &http.Client{}
	}
	return &Client{base: strings.TrimRight(baseURL, "/"), hc: hc}
}

// dialRetry is how long Dial waits between two reads that failed.
const dialRetry = 200 * time.Millisecond

// Dial returns New(baseURL, hc) that has read what the simulator takes
// (GET /_sim/methods): its test payment methods and its currency rules.
// A simulator that answers 404 (one that does not serve it) gets the
// client New returns. Until ctx ends, Dial reads again after a failure (a
// simulator still starting); then it returns the last error.
func Dial(ctx context.Context, baseURL string, hc *http.Client) (*Client, error) {
	c := New(baseURL, hc)
	for {
		err := c.readMethods(ctx)
		var api *APIError
		switch {
		case err == nil, errors.Is(err, provider.ErrNotFound), errors.As(err, &api) && api.StatusCode == http.StatusNotFound:
			return c, nil
		case api != nil, errors.Is(err, errUnknownRules):
			return nil, fmt.Errorf("simclient: read what the simulator takes: %w", err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("simclient: read what the simulator takes: %w", err)
		case <-time.After(dialRetry):
		}
	}
}

// errUnknownRules: the simulator plays currency rules the client does not
// have.
var errUnknownRules = errors.New("unknown currency rules")

// readMethods reads GET /_sim/methods into c.
func (c *Client) readMethods(ctx context.Context) error {
	b, err := c.get(ctx, "/_sim/methods", nil)
	if err != nil {
		return err
	}
	var body struct {
		PaymentMethods []struct {
			PaymentMethod string `json:"paymentMethod"`
		} `json:"paymentMethods"`
		CurrencyRules string `json:"currencyRules"`
	}
	if err := json.Unmarshal(b, &body); err != nil || len(body.PaymentMethods) == 0 {
		return fmt.Errorf("%w: malformed list of payment methods", provider.ErrUnknownOutcome)
	}
	rules, err := units.Named(body.CurrencyRules)
	if err != nil {
		return fmt.Errorf("%w: %w", errUnknownRules, err)
	}
	methods := make([]string, 0, len(body.PaymentMethods))
	for _, m := range body.PaymentMethods {
		methods = append(methods, m.PaymentMethod)
	}
	c.rules, c.methods = rules, methods
	return nil
}

// Check refuses, with a *provider.Refusal, a charge whose payment method
// is none of the simulator's test payment methods, and an amount the
// simulator's currency rules refuse. A client that has not read them
// (New) refuses nothing.
func (c *Client) Check(p provider.Proposal) error {
	if p.PaymentMethod != "" && c.methods != nil && !slices.Contains(c.methods, p.PaymentMethod) {
		return &provider.Refusal{Reason: provider.RefusedPaymentMethod, Detail: fmt.Sprintf(
			"%s is none of the provider simulator's test payment methods: %s", p.PaymentMethod, strings.Join(c.methods, ", "))}
	}
	_, err := c.rules.ToProvider(p.AmountMinor, p.Currency)
	return err
}

// Rules are the currency rules the client converts amounts with: the
// simulator's, once Dial has read them.
func (c *Client) Rules() units.Rules { return c.rules }

// Methods are the simulator's test payment methods, which Check requires
// of a charge; nil when the client checks none (New, or a simulator that
// does not list them).
func (c *Client) Methods() []string { return c.methods }

// APIError is a request the provider rejected with a 4xx status (or, for
// Lookup, a 404 that is not the simulator's "not_found"). It is not one of
// the provider package's sentinel errors.
type APIError struct {
	StatusCode int    // HTTP status
	Code       string // the body's "error" field, such as "idempotency_key_reused"; may be empty
	Message    string // the body's "message" field; may be empty
}

// Error describes the rejection.
func (e *APIError) Error() string {
	s := fmt.Sprintf("provider rejected the request: HTTP %d", e.StatusCode)
	if e.Code != "" {
		s += " " + e.Code
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// chargeBody is the simulator's representation of a charge.
type chargeBody struct {
	ID                  string          `json:"id"`
	IdempotencyKey      string          `json:"idempotencyKey"`
	Status              provider.Status `json:"status"`
	DeclineCode         string          `json:"declineCode"`
	AmountMinor         int64           `json:"amountMinor"`
	Currency            string          `json:"currency"`
	AmountCapturedMinor int64           `json:"amountCapturedMinor"`
	NextActionURL       string          `json:"nextActionUrl"`
}

// actionBody is the simulator's representation of a capture or a void:
// its verdict, and the charge as it left it.
type actionBody struct {
	ID             string          `json:"id"`
	IdempotencyKey string          `json:"idempotencyKey"`
	ChargeID       string          `json:"chargeId"`
	Status         provider.Status `json:"status"`
	DeclineCode    string          `json:"declineCode"`
	Charge         chargeBody      `json:"charge"`
}

// refundBody is the simulator's representation of a refund.
type refundBody struct {
	ID             string          `json:"id"`
	IdempotencyKey string          `json:"idempotencyKey"`
	ChargeID       string          `json:"chargeId"`
	Status         provider.Status `json:"status"`
	DeclineCode    string          `json:"declineCode"`
	AmountMinor    int64           `json:"amountMinor"`
	Currency       string          `json:"currency"`
}

type errorBody struct {
	Error   string `json:"error"`
	Message string `json:"message"`
}

// Charge creates a charge with req.IdempotencyKey, or returns the one the
// simulator already holds for it. With req.CaptureManual the simulator only
// authorizes a charge that would succeed (provider.StatusAuthorized). The
// simulator answers a charge as it now stands: the same key after a capture
// or void of the authorization answers it succeeded or canceled. See the
// package documentation for errors.
func (c *Client) Charge(ctx context.Context, req provider.ChargeRequest) (provider.Charge, error) {
	if req.IdempotencyKey == "" {
		return provider.Charge{}, errors.New("simclient: charge: empty idempotency key")
	}
	amount, err := c.rules.ToProvider(req.AmountMinor, req.Currency)
	if err != nil {
		return provider.Charge{}, fmt.Errorf("simclient: charge with key %q: not sent: %w", req.IdempotencyKey, err)
	}
	// An automatic charge sends no captureMethod, the simulator's default.
	captureMethod := ""
	if req.CaptureManual {
		captureMethod = "manual"
	}
	b, err := c.post(ctx, "/v1/charges", req.IdempotencyKey, struct {
		AmountMinor   int64  `json:"amountMinor"`
		Currency      string `json:"currency"`
		PaymentMethod string `json:"paymentMethod"`
		Description   string `json:"description,omitempty"`
		PaymentID     string `json:"paymentId,omitempty"`
		CaptureMethod string `json:"captureMethod,omitempty"`
		ReturnURL     string `json:"returnUrl,omitempty"`
	}{amount, req.Currency, req.PaymentMethod, req.Description, req.PaymentID, captureMethod, req.ReturnURL})
	if err == nil {
		var ch provider.Charge
		if ch, err = c.decodeCharge(b, req.IdempotencyKey); err == nil {
			return ch, nil
		}
	}
	return provider.Charge{}, fmt.Errorf("simclient: charge with key %q: %w", req.IdempotencyKey, err)
}

// Lookup returns the newest charge the simulator created with
// l.IdempotencyKey; l.NotBefore is not needed. See the package documentation
// for errors.
func (c *Client) Lookup(ctx context.Context, l provider.ChargeLookup) (provider.Charge, error) {
	key := l.IdempotencyKey
	if key == "" {
		return provider.Charge{}, errors.New("simclient: lookup: empty idempotency key")
	}
	b, err := c.get(ctx, "/v1/charges", url.Values{"idempotencyKey": {key}})
	if err == nil {
		var ch provider.Charge
		if ch, err = c.decodeCharge(b, key); err == nil {
			return ch, nil
		}
	}
	return provider.Charge{}, fmt.Errorf("simclient: lookup of key %q: %w", key, err)
}

// Refund refunds req.AmountMinor of charge req.ChargeID with
// req.IdempotencyKey, or returns the refund the simulator already holds for
// that key. A refund the simulator declines (a refund_declined payment
// method, more than is left of the charge, another currency) is a Refund
// with provider.StatusDeclined and a nil error. A charge the simulator does
// not hold is an *APIError 404 charge_not_found. See the package
// documentation for the other errors.
func (c *Client) Refund(ctx context.Context, req provider.RefundRequest) (provider.Refund, error) {
	if req.IdempotencyKey == "" || req.ChargeID == "" {
		return provider.Refund{}, errors.New("simclient: refund: empty idempotency key or charge id")
	}
	amount, err := c.rules.ToProvider(req.AmountMinor, req.Currency)
	if err != nil {
		return provider.Refund{}, fmt.Errorf("simclient: refund with key %q: not sent: %w", req.IdempotencyKey, err)
	}
	b, err := c.post(ctx, "/v1/refunds", req.IdempotencyKey, struct {
		ChargeID    string `json:"chargeId"`
		AmountMinor int64  `json:"amountMinor"`
		Currency    string `json:"currency"`
		Reason      string `json:"reason,omitempty"`
		RefundID    string `json:"refundId,omitempty"`
	}{req.ChargeID, amount, req.Currency, req.Reason, req.RefundID})
	if err == nil {
		var rf provider.Refund
		if rf, err = c.decodeRefund(b, req.IdempotencyKey, req.ChargeID); err == nil {
			return rf, nil
		}
	}
	return provider.Refund{}, fmt.Errorf("simclient: refund with key %q: %w", req.IdempotencyKey, err)
}

// LookupRefund returns the newest refund the simulator created with
// l.IdempotencyKey (of charge l.ChargeID, when set). See the package
// documentation for errors.
func (c *Client) LookupRefund(ctx context.Context, l provider.RefundLookup) (provider.Refund, error) {
	if l.IdempotencyKey == "" {
		return provider.Refund{}, errors.New("simclient: refund lookup: empty idempotency key")
	}
	q := url.Values{"idempotencyKey": {l.IdempotencyKey}}
	if l.ChargeID != "" {
		q.Set("chargeId", l.ChargeID)
	}
	b, err := c.get(ctx, "/v1/refunds", q)
	if err == nil {
		var rf provider.Refund
		if rf, err = c.decodeRefund(b, l.IdempotencyKey, l.ChargeID); err == nil {
			return rf, nil
		}
	}
	return provider.Refund{}, fmt.Errorf("simclient: refund lookup of key %q: %w", l.IdempotencyKey, err)
}

// Capture captures req.AmountMinor of the authorized charge req.ChargeID
// with req.IdempotencyKey, or returns the simulator's stored answer for that
// key, and returns the charge: provider.StatusSucceeded with
// AmountCapturedMinor, or provider.StatusDeclined with the simulator's
// DeclineCode (charge_canceled, charge_already_captured, amount_too_large,
// ...) and a nil error. A charge the simulator does not hold is an
// *APIError 404 charge_not_found. See the package documentation for the
// other errors.
func (c *Client) Capture(ctx context.Context, req provider.CaptureRequest) (provider.Charge, error) {
	if req.IdempotencyKey == "" || req.ChargeID == "" {
		return provider.Charge{}, errors.New("simclient: capture: empty idempotency key or charge id")
	}
	amount, err := c.rules.ToProvider(req.AmountMinor, req.Currency)
	if err != nil {
		return provider.Charge{}, fmt.Errorf("simclient: capture of %s with key %q: not sent: %w", req.ChargeID, req.IdempotencyKey, err)
	}
	b, err := c.post(ctx, "/v1/captures", req.IdempotencyKey, struct {
		ChargeID    string `json:"chargeId"`
		AmountMinor int64  `json:"amountMinor"`
		Currency    string `json:"currency"`
		PaymentID   string `json:"paymentId,omitempty"`
	}{req.ChargeID, amount, req.Currency, req.PaymentID})
	if err == nil {
		var ch provider.Charge
		if ch, err = c.decodeAction(b, "capture", req.IdempotencyKey, req.ChargeID, provider.StatusSucceeded); err == nil {
			return ch, nil
		}
	}
	return provider.Charge{}, fmt.Errorf("simclient: capture of %s with key %q: %w", req.ChargeID, req.IdempotencyKey, err)
}

// Void voids the authorization of charge req.ChargeID with
// req.IdempotencyKey, or returns the simulator's stored answer for that key,
// and returns the charge: provider.StatusCanceled, or
// provider.StatusDeclined with the simulator's DeclineCode
// (charge_already_captured, ...) and a nil error. Errors are those of
// Capture.
func (c *Client) Void(ctx context.Context, req provider.VoidRequest) (provider.Charge, error) {
	if req.IdempotencyKey == "" || req.ChargeID == "" {
		return provider.Charge{}, errors.New("simclient: void: empty idempotency key or charge id")
	}
	b, err := c.post(ctx, "/v1/voids", req.IdempotencyKey, struct {
		ChargeID  string `json:"chargeId"`
		Reason    string `json:"reason,omitempty"`
		PaymentID string `json:"paymentId,omitempty"`
	}{req.ChargeID, req.Reason, req.PaymentID})
	if err == nil {
		var ch provider.Charge
		if ch, err = c.decodeAction(b, "void", req.IdempotencyKey, req.ChargeID, provider.StatusCanceled); err == nil {
			return ch, nil
		}
	}
	return provider.Charge{}, fmt.Errorf("simclient: void of %s with key %q: %w", req.ChargeID, req.IdempotencyKey, err)
}

// LookupCapture returns the capture the simulator created with
// l.IdempotencyKey, as Capture answered it (its verdict, and the charge as
// the capture left it). See the package documentation for errors.
func (c *Client) LookupCapture(ctx context.Context, l provider.ActionLookup) (provider.Charge, error) {
	if l.IdempotencyKey == "" || l.ChargeID == "" {
		return provider.Charge{}, errors.New("simclient: capture lookup: empty idempotency key or charge id")
	}
	b, err := c.get(ctx, "/v1/captures", url.Values{"idempotencyKey": {l.IdempotencyKey}})
	if err == nil {
		var ch provider.Charge
		if ch, err = c.decodeAction(b, "capture", l.IdempotencyKey, l.ChargeID, provider.StatusSucceeded); err == nil {
			return ch, nil
		}
	}
	return provider.Charge{}, fmt.Errorf("simclient: capture lookup of key %q: %w", l.IdempotencyKey, err)
}

// GetCharge returns the charge chargeID as the simulator now holds it
// (read-after-write), or provider.ErrNotFound. Its IdempotencyKey is the
// key the charge was created with. See the package documentation for
// errors.
func (c *Client) GetCharge(ctx context.Context, chargeID string) (provider.Charge, error) {
	if chargeID == "" {
		return provider.Charge{}, errors.New("simclient: get charge: empty charge id")
	}
	b, err := c.get(ctx, "/v1/charges/"+url.PathEscape(chargeID), nil)
	if err == nil {
		var ch provider.Charge
		if ch, err = c.decodeCharge(b, ""); err == nil && ch.ID != chargeID {
			err = fmt.Errorf("%w: malformed charge: id %q, want %q", provider.ErrUnknownOutcome, ch.ID, chargeID)
		}
		if err == nil {
			return ch, nil
		}
	}
	return provider.Charge{}, fmt.Errorf("simclient: get charge %s: %w", chargeID, err)
}

// LookupLag is zero: the simulator's lookups read the memory its creates
// write.
func (c *Client) LookupLag() time.Duration { return 0 }

// post sends v as JSON to path with the idempotency key, and returns the
// body of a 200 answer or a classified error.
func (c *Client) post(ctx context.Context, path, key string, v any) ([]byte, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encoding request: %w", err)
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Idempotency-Key", key)
	return c.do(hreq, false)
}

// get sends a read to path with query q (none if empty), and returns the
// body of a 200 answer or a classified error.
func (c *Client) get(ctx context.Context, path string, q url.Values) ([]byte, error) {
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	return c.do(hreq, true)
}

// do sends hreq and returns the body of a 200 answer, or maps the answer to a
// classified error.
func (c *Client) do(hreq *http.Request, lookup bool) ([]byte, error) {
	// net/http may resend a request that carries an Idempotency-Key after a
	// reused connection failed, possibly after the first copy was processed.
	// Only a failure with no connection ever obtained proves "never sent",
	// and a refusal proves "not processed" only if it answers the one copy
	// that was sent.
	var conns atomic.Int32
	hreq = hreq.WithContext(httptrace.WithClientTrace(hreq.Context(), &httptrace.ClientTrace{
		GotConn: func(httptrace.GotConnInfo) { conns.Add(1) },
	}))
	resp, err := c.hc.Do(hreq)
	if err != nil {
		return nil, transportError(err, conns.Load() > 0)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	if err != nil {
		// The status line arrived but the body did not: the request was
		// processed to some point we cannot see.
		return nil, fmt.Errorf("%w: reading HTTP %d response: %w", provider.ErrUnknownOutcome, resp.StatusCode, err)
	}
	switch s := resp.StatusCode; {
	case s == http.StatusOK:
		return b, nil
	case s == http.StatusServiceUnavailable && conns.Load() > 1:
		return nil, fmt.Errorf("%w: HTTP 503%s answers a resend on a new connection; the first copy may have been processed", provider.ErrUnknownOutcome, detail(b))
	case s == http.StatusServiceUnavailable:
		return nil, fmt.Errorf("%w: HTTP 503%s", provider.ErrUnavailable, detail(b))
	case s == http.StatusNotFound && lookup:
		var eb errorBody
		if json.Unmarshal(b, &eb) == nil && eb.Error == "not_found" {
			return nil, provider.ErrNotFound
		}
		return nil, apiError(s, b)
	case s >= 400 && s < 500:
		return nil, apiError(s, b)
	default:
		return nil, fmt.Errorf("%w: unexpected HTTP %d%s", provider.ErrUnknownOutcome, s, detail(b))
	}
}

// transportError classifies an error from http.Client.Do: only a failed dial,
// with no connection obtained before it, proves that the request was never
// sent.
func transportError(err error, connected bool) error {
	var op *net.OpError
	if !connected && errors.As(err, &op) && op.Op == "dial" {
		return fmt.Errorf("%w: %w", provider.ErrUnavailable, err)
	}
	return fmt.Errorf("%w: %w", provider.ErrUnknownOutcome, err)
}

// checkAnswer checks the fields that every answer shares: an id, one of
// the statuses the answer can have (succeeded or declined when statuses is
// empty), and the idempotency key asked for (any but none when key is
// empty).
func checkAnswer(kind, id, gotKey, key string, status provider.Status, statuses ...provider.Status) error {
	if len(statuses) == 0 {
		statuses = []provider.Status{provider.StatusSucceeded, provider.StatusDeclined}
	}
	switch {
	case id == "":
		return fmt.Errorf("%w: malformed %s: no id", provider.ErrUnknownOutcome, kind)
	case !slices.Contains(statuses, status):
		return fmt.Errorf("%w: malformed %s: unknown status %q", provider.ErrUnknownOutcome, kind, status)
	case gotKey == "" || key != "" && gotKey != key:
		return fmt.Errorf("%w: malformed %s: idempotency key %q, want %q", provider.ErrUnknownOutcome, kind, gotKey, key)
	}
	return nil
}

// chargeStatuses are the statuses a charge can stand at: one made with
// CaptureManual is authorized, then captured (succeeded) or voided.
var chargeStatuses = []provider.Status{provider.StatusSucceeded, provider.StatusDeclined, provider.StatusAuthorized,
	provider.StatusCanceled, provider.StatusRequiresAction}

// decodeCharge decodes a charge created with key (with any key when key is
// empty).
func (c *Client) decodeCharge(b []byte, key string) (provider.Charge, error) {
	var cb chargeBody
	if err := json.Unmarshal(b, &cb); err != nil {
		return provider.Charge{}, fmt.Errorf("%w: malformed charge: %w", provider.ErrUnknownOutcome, err)
	}
	if err := checkAnswer("charge", cb.ID, cb.IdempotencyKey, key, cb.Status, chargeStatuses...); err != nil {
		return provider.Charge{}, err
	}
	return c.charge(cb)
}

// charge is the charge cb, its amounts in the service's unit.
func (c *Client) charge(cb chargeBody) (provider.Charge, error) {
	ch := provider.Charge{
		ID:             cb.ID,
		IdempotencyKey: cb.IdempotencyKey,
		Status:         cb.Status,
		DeclineCode:    cb.DeclineCode,
		Currency:       cb.Currency,
	}
	if cb.Status == provider.StatusRequiresAction {
		ch.NextActionURL = cb.NextActionURL
	}
	if err := c.rules.ReadCharge(&ch, cb.AmountMinor, cb.AmountCapturedMinor); err != nil {
		return provider.Charge{}, fmt.Errorf("charge %s: %w", cb.ID, err)
	}
	return ch, nil
}

// decodeAction decodes a capture or void (kind) answered for key, of charge
// chargeID, whose verdict is done or declined, and returns the charge as
// the action left it, with the verdict as its Status.
func (c *Client) decodeAction(b []byte, kind, key, chargeID string, done provider.Status) (provider.Charge, error) {
	var ab actionBody
	if err := json.Unmarshal(b, &ab); err != nil {
		return provider.Charge{}, fmt.Errorf("%w: malformed %s: %w", provider.ErrUnknownOutcome, kind, err)
	}
	if err := checkAnswer(kind, ab.ID, ab.IdempotencyKey, key, ab.Status, done, provider.StatusDeclined); err != nil {
		return provider.Charge{}, err
	}
	if ab.ChargeID != chargeID || ab.Charge.ID != chargeID {
		return provider.Charge{}, fmt.Errorf("%w: malformed %s: of charge %q (%q), want %q", provider.ErrUnknownOutcome, kind, ab.ChargeID, ab.Charge.ID, chargeID)
	}
	ch, err := c.charge(ab.Charge)
	if err != nil {
		return provider.Charge{}, err
	}
	ch.Status, ch.DeclineCode = ab.Status, ab.DeclineCode
	return ch, nil
}

// decodeRefund decodes a refund answered for key, of charge chargeID when
// that is not empty.
func (c *Client) decodeRefund(b []byte, key, chargeID string) (provider.Refund, error) {
	var rb refundBody
	if err := json.Unmarshal(b, &rb); err != nil {
		return provider.Refund{}, fmt.Errorf("%w: malformed refund: %w", provider.ErrUnknownOutcome, err)
	}
	if err := checkAnswer("refund", rb.ID, rb.IdempotencyKey, key, rb.Status); err != nil {
		return provider.Refund{}, err
	}
	if rb.ChargeID == "" || (chargeID != "" && rb.ChargeID != chargeID) {
		return provider.Refund{}, fmt.Errorf("%w: malformed refund: charge %q, want %q", provider.ErrUnknownOutcome, rb.ChargeID, chargeID)
	}
	return c.refund(rb)
}

// refund is the refund rb, its amount in the service's unit.
func (c *Client) refund(rb refundBody) (provider.Refund, error) {
	amount, err := c.rules.FromProvider(rb.AmountMinor, rb.Currency)
	if err != nil {
		return provider.Refund{}, fmt.Errorf("refund %s: %w", rb.ID, err)
	}
	return provider.Refund{
		ID:             rb.ID,
		IdempotencyKey: rb.IdempotencyKey,
		ChargeID:       rb.ChargeID,
		Status:         rb.Status,
		DeclineCode:    rb.DeclineCode,
		AmountMinor:    amount,
		Currency:       rb.Currency,
	}, nil
}

func apiError(status int, b []byte) *APIError {
	e := &APIError{StatusCode: status}
	var eb errorBody
	if json.Unmarshal(b, &eb) == nil {
		e.Code, e.Message = eb.Error, eb.Message
	}
	return e
}

// detail renders a short excerpt of an error body for a message.
func detail(b []byte) string {
	var eb errorBody
	if json.Unmarshal(b, &eb) == nil && eb.Error != "" {
		return " " + eb.Error
	}
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	if s == "" {
		return ""
	}
	return ": " + s
}
