// Package simclient implements provider.Provider against the HTTP API of the
// provider simulator (package sim, binary providersim).
//
// The error a call returns tells the caller whether money may have moved.
// Charge maps outcomes as follows:
//
//   - 200 with a well-formed charge: the charge, nil error (a decline is a
//     charge with provider.StatusDeclined).
//   - The connection could not be made (a *net.OpError with Op "dial":
//     refused, unreachable, no such host), so the request was never sent:
//     provider.ErrUnavailable.
//   - 503: provider.ErrUnavailable (the provider refused before processing).
//   - Any other failure after the request may have been sent: the context's
//     deadline or cancellation, a timeout, a reset or closed connection, EOF
//     before or during the response, any 5xx other than 503, an unexpected
//     status outside 2xx and 4xx, an unreadable or malformed body:
//     provider.ErrUnknownOutcome. Money may have moved; find out with Lookup.
//   - 4xx (422 idempotency_key_reused, 400 invalid request, ...): an
//     *APIError, which is neither sentinel. The provider rejected the
//     request; retrying it unchanged will not help.
//
// Lookup maps the same way, except that:
//
//   - 404 whose body is the simulator's {"error":"not_found"}:
//     provider.ErrNotFound. A 404 without that body (a wrong base URL, a
//     proxy page) is an *APIError, never ErrNotFound, because ErrNotFound
//     claims certainty that no charge exists.
//   - Every other failure is not ErrNotFound: 503 and dial failures wrap
//     ErrUnavailable, timeouts and the rest wrap ErrUnknownOutcome.
//
// Sentinels are wrapped together with the underlying error, so
// errors.Is(err, context.DeadlineExceeded) also works. The caller bounds each
// call with its context; the client adds no timeout of its own.
//
// Note that net/http's Transport may itself resend a request carrying an
// Idempotency-Key header when a reused keep-alive connection fails before
// any response byte arrives. That is safe here: the simulator answers a
// resend with the stored charge and counts it in requestCount.
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
	"strings"
	"sync/atomic"

	"github.com/paymentsapi/paymentsapi/internal/provider"
)

// maxResponse bounds how much of a response body is read.
const maxResponse = 1 << 20

// Client talks to a provider simulator. It is safe for concurrent use.
type Client struct {
	base string
	hc   *http.Client
}

var _ provider.Provider = (*Client)(nil)

// New returns a Client for the simulator at baseURL (such as
// "http://127.0.0.1:8081"), sending requests with hc; nil hc means a client
// on http.DefaultTransport with no timeout of its own.
func New(baseURL string, hc *http.Client) *Client {
	if hc == nil {
		hc = &http.Client{}
	}
	return &Client{base: strings.TrimRight(baseURL, "/"), hc: hc}
}

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
	ID             string          `json:"id"`
	IdempotencyKey string          `json:"idempotencyKey"`
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
// simulator already holds for it. See the package documentation for errors.
func (c *Client) Charge(ctx context.Context, req provider.ChargeRequest) (provider.Charge, error) {
	if req.IdempotencyKey == "" {
		return provider.Charge{}, errors.New("simclient: charge: empty idempotency key")
	}
	body, err := json.Marshal(struct {
		AmountMinor   int64  `json:"amountMinor"`
		Currency      string `json:"currency"`
		PaymentMethod string `json:"paymentMethod"`
		Description   string `json:"description,omitempty"`
		PaymentID     string `json:"paymentId,omitempty"`
	}{req.AmountMinor, req.Currency, req.PaymentMethod, req.Description, req.PaymentID})
	if err != nil {
		return provider.Charge{}, fmt.Errorf("simclient: charge: encoding request: %w", err)
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/v1/charges", bytes.NewReader(body))
	if err != nil {
		return provider.Charge{}, fmt.Errorf("simclient: charge: %w", err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Idempotency-Key", req.IdempotencyKey)
	ch, err := c.do(hreq, req.IdempotencyKey, false)
	if err != nil {
		return provider.Charge{}, fmt.Errorf("simclient: charge with key %q: %w", req.IdempotencyKey, err)
	}
	return ch, nil
}

// Lookup returns the newest charge the simulator created with key. See the
// package documentation for errors.
func (c *Client) Lookup(ctx context.Context, key string) (provider.Charge, error) {
	if key == "" {
		return provider.Charge{}, errors.New("simclient: lookup: empty idempotency key")
	}
	u := c.base + "/v1/charges?" + url.Values{"idempotencyKey": {key}}.Encode()
	hreq, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return provider.Charge{}, fmt.Errorf("simclient: lookup: %w", err)
	}
	ch, err := c.do(hreq, key, true)
	if err != nil {
		return provider.Charge{}, fmt.Errorf("simclient: lookup of key %q: %w", key, err)
	}
	return ch, nil
}

// do sends hreq and maps the answer to a charge or a classified error.
func (c *Client) do(hreq *http.Request, key string, lookup bool) (provider.Charge, error) {
	// net/http may resend a request that carries an Idempotency-Key after a
	// reused connection failed, possibly after the first copy was processed.
	// Only a failure with no connection ever obtained proves "never sent".
	var gotConn atomic.Bool
	hreq = hreq.WithContext(httptrace.WithClientTrace(hreq.Context(), &httptrace.ClientTrace{
		GotConn: func(httptrace.GotConnInfo) { gotConn.Store(true) },
	}))
	resp, err := c.hc.Do(hreq)
	if err != nil {
		return provider.Charge{}, transportError(err, gotConn.Load())
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	if err != nil {
		// The status line arrived but the body did not: the request was
		// processed to some point we cannot see.
		return provider.Charge{}, fmt.Errorf("%w: reading HTTP %d response: %w", provider.ErrUnknownOutcome, resp.StatusCode, err)
	}
	switch s := resp.StatusCode; {
	case s == http.StatusOK:
		return decodeCharge(b, key)
	case s == http.StatusServiceUnavailable:
		return provider.Charge{}, fmt.Errorf("%w: HTTP 503%s", provider.ErrUnavailable, detail(b))
	case s == http.StatusNotFound && lookup:
		var eb errorBody
		if json.Unmarshal(b, &eb) == nil && eb.Error == "not_found" {
			return provider.Charge{}, provider.ErrNotFound
		}
		return provider.Charge{}, apiError(s, b)
	case s >= 400 && s < 500:
		return provider.Charge{}, apiError(s, b)
	default:
		return provider.Charge{}, fmt.Errorf("%w: unexpected HTTP %d%s", provider.ErrUnknownOutcome, s, detail(b))
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

func decodeCharge(b []byte, key string) (provider.Charge, error) {
	var cb chargeBody
	if err := json.Unmarshal(b, &cb); err != nil {
		return provider.Charge{}, fmt.Errorf("%w: malformed charge: %w", provider.ErrUnknownOutcome, err)
	}
	switch {
	case cb.ID == "":
		return provider.Charge{}, fmt.Errorf("%w: malformed charge: no id", provider.ErrUnknownOutcome)
	case cb.Status != provider.StatusSucceeded && cb.Status != provider.StatusDeclined:
		return provider.Charge{}, fmt.Errorf("%w: malformed charge: unknown status %q", provider.ErrUnknownOutcome, cb.Status)
	case cb.IdempotencyKey != key:
		return provider.Charge{}, fmt.Errorf("%w: malformed charge: idempotency key %q, want %q", provider.ErrUnknownOutcome, cb.IdempotencyKey, key)
	}
	return provider.Charge{
		ID:             cb.ID,
		IdempotencyKey: cb.IdempotencyKey,
		Status:         cb.Status,
		DeclineCode:    cb.DeclineCode,
		AmountMinor:    cb.AmountMinor,
		Currency:       cb.Currency,
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

// errRefundsNotYet is returned until the simulator speaks refunds.
var errRefundsNotYet = errors.New("simclient: refunds are not implemented yet")

// Refund is not implemented yet.
func (c *Client) Refund(context.Context, provider.RefundRequest) (provider.Refund, error) {
	return provider.Refund{}, errRefundsNotYet
}

// LookupRefund is not implemented yet.
func (c *Client) LookupRefund(context.Context, provider.RefundLookup) (provider.Refund, error) {
	return provider.Refund{}, errRefundsNotYet
}
