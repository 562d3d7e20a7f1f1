package stripeprovider

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"

	stripe "github.com/stripe/stripe-go/v76"

	"github.com/paymentsapi/paymentsapi/internal/provider"
)

// APIError is an error answer: Stripe's error object when the body was one,
// or only the status when whatever answered at the base URL sent something
// else. On its own (a 4xx other than 409 and 429) it is neither sentinel;
// for a 409, a 429 or a 5xx it comes wrapped together with the sentinel.
// When the body was Stripe's error object, errors.As also finds the
// *stripe.Error.
type APIError struct {
	StatusCode  int    // HTTP status
	Type        string // Stripe's error type, such as "invalid_request_error" or "idempotency_error"; empty when the body was not a Stripe error
	Code        string // Stripe's error code, such as "parameter_missing"; may be empty
	DeclineCode string // the issuer's decline code; may be empty
	Message     string // Stripe's message, or a note that the body was not a Stripe error
	RequestID   string // Stripe's Request-Id; may be empty
	err         error
}

// Error describes the answer. It never includes stripe-go's error text,
// which can carry a PaymentIntent's client_secret.
func (e *APIError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "stripe answered HTTP %d", e.StatusCode)
	for _, s := range []string{e.Type, e.Code, e.DeclineCode} {
		if s != "" {
			b.WriteString(" " + s)
		}
	}
	if e.Message != "" {
		b.WriteString(": " + e.Message)
	}
	if e.RequestID != "" {
		b.WriteString(" (request " + e.RequestID + ")")
	}
	return b.String()
}

// Unwrap returns the *stripe.Error, or stripe-go's error (redacted) for a
// body that was not a Stripe error.
func (e *APIError) Unwrap() error { return e.err }

func apiErrorFromStripe(se *stripe.Error) *APIError {
	return &APIError{
		StatusCode:  se.HTTPStatusCode,
		Type:        string(se.Type),
		Code:        string(se.Code),
		DeclineCode: string(se.DeclineCode),
		Message:     se.Msg,
		RequestID:   se.RequestID,
		err:         se,
	}
}

// classify turns the error of one stripe-go call into what the caller needs
// to know: whether the request may have been processed. trace is what the
// call's HTTP client saw on the wire.
func classify(err error, trace *callTrace) error {
	seen := trace.snapshot()
	// net/http resends a request that carries an Idempotency-Key on a new
	// connection when a reused one fails, possibly after Stripe received
	// the first copy: an answer to a resend tells nothing about that copy.
	resent := seen.conns > 1
	var se *stripe.Error
	if errors.As(err, &se) && se.HTTPStatusCode != 0 {
		return byStatus(se.HTTPStatusCode, apiErrorFromStripe(se), resent)
	}
	redacted := errors.New(redact(err.Error()))
	switch {
	case seen.status != 0 && seen.bodyErr != nil:
		// The status arrived but the body did not: a 4xx whose body is
		// lost could be a decline or a rejection, so only 429 says more
		// than "unknown".
		if seen.status == http.StatusTooManyRequests && !resent {
			return fmt.Errorf("%w: HTTP 429 (body lost: %w)", provider.ErrUnavailable, seen.bodyErr)
		}
		return fmt.Errorf("%w: reading the HTTP %d answer: %w", provider.ErrUnknownOutcome, seen.status, seen.bodyErr)
	case seen.status >= 200 && seen.status < 400:
		return fmt.Errorf("%w: HTTP %d answer could not be decoded: %w", provider.ErrUnknownOutcome, seen.status, redacted)
	case seen.status != 0:
		return byStatus(seen.status, &APIError{StatusCode: seen.status, Message: "the answer is not a Stripe error object", err: redacted}, resent)
	case seen.roundTrips == 0:
		// stripe-go gave up before handing the request to the HTTP client.
		return fmt.Errorf("request not sent: %w", err)
	case isDial(err) && seen.conns == 0:
		return fmt.Errorf("%w: %w", provider.ErrUnavailable, err)
	default:
		return fmt.Errorf("%w: %w", provider.ErrUnknownOutcome, err)
	}
}

// byStatus classifies an error answer by its HTTP status. resent says that
// the answer is to a copy of the request that net/http sent again on a new
// connection, so that a refusal (429) proves nothing about the first copy.
func byStatus(status int, apiErr *APIError, resent bool) error {
	switch {
	case status == http.StatusTooManyRequests && resent:
		return fmt.Errorf("%w: the refusal answers a copy that net/http resent on a new connection, and Stripe may have processed the first: %w", provider.ErrUnknownOutcome, apiErr)
	case status == http.StatusTooManyRequests:
		return fmt.Errorf("%w: %w", provider.ErrUnavailable, apiErr)
	case status == http.StatusConflict:
		return fmt.Errorf("%w: another request with this idempotency key is still executing: %w", provider.ErrUnknownOutcome, apiErr)
	case status >= 400 && status < 500:
		return apiErr
	default:
		return fmt.Errorf("%w: %w", provider.ErrUnknownOutcome, apiErr)
	}
}

// isDial reports whether err is a failure to connect.
func isDial(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// redact hides client secrets ("pi_..._secret_...") in s.
func redact(s string) string {
	const marker = "_secret_"
	var b strings.Builder
	for {
		i := strings.Index(s, marker)
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		b.WriteString(s[:i+len(marker)])
		s = s[i+len(marker):]
		j := 0
		for j < len(s) && isAlnum(s[j]) {
			j++
		}
		if j > 0 {
			b.WriteString("REDACTED")
		}
		s = s[j:]
	}
}

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// callTrace records what one API call did on the wire: whether the HTTP
// client was reached, whether a connection was ever obtained, and the last
// answer's status and body error. Its hooks may run on other goroutines.
type callTrace struct {
	mu sync.Mutex
	traceSnapshot
}

type traceSnapshot struct {
	roundTrips int   // requests handed to the transport
	conns      int   // connections obtained (httptrace GotConn)
	status     int   // status of the last answer; 0 if none arrived
	bodyErr    error // error reading the last answer's body, other than EOF
}

func (t *callTrace) snapshot() traceSnapshot {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.traceSnapshot
}

func (t *callTrace) update(f func(*traceSnapshot)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f(&t.traceSnapshot)
}

type traceKey struct{}

// withCallTrace returns a context that makes the Provider's transport
// record the call into the returned trace.
func withCallTrace(ctx context.Context) (context.Context, *callTrace) {
	t := &callTrace{}
	ctx = context.WithValue(ctx, traceKey{}, t)
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(httptrace.GotConnInfo) { t.update(func(s *traceSnapshot) { s.conns++ }) },
	})
	return ctx, t
}

// observingTransport records each round trip into the request's callTrace.
type observingTransport struct {
	next http.RoundTripper
}

// RoundTrip sends req with the wrapped transport and records the answer.
func (o *observingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	t, _ := req.Context().Value(traceKey{}).(*callTrace)
	if t == nil {
		return o.next.RoundTrip(req)
	}
	t.update(func(s *traceSnapshot) { s.roundTrips++ })
	resp, err := o.next.RoundTrip(req)
	if resp != nil {
		t.update(func(s *traceSnapshot) { s.status, s.bodyErr = resp.StatusCode, nil })
		resp.Body = &observedBody{ReadCloser: resp.Body, trace: t}
	}
	return resp, err
}

// CloseIdleConnections closes the wrapped transport's idle connections, so
// that http.Client.CloseIdleConnections still reaches them.
func (o *observingTransport) CloseIdleConnections() {
	if c, ok := o.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// observedBody records a failure to read an answer's body.
type observedBody struct {
	io.ReadCloser
	trace *callTrace
}

func (b *observedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		b.trace.update(func(s *traceSnapshot) { s.bodyErr = err })
	}
	return n, err
}

// leveledLogger sends stripe-go's log lines to slog: its errors and warnings
// as warnings (the Provider returns the error to the caller, who decides),
// its per-request information as debug. Its debug lines are dropped: they
// hold whole answers, client secrets included.
type leveledLogger struct {
	log *slog.Logger
}

func (l leveledLogger) Debugf(string, ...any) {}

func (l leveledLogger) Infof(format string, v ...any) {
	l.log.Debug(redact(fmt.Sprintf(format, v...)))
}

func (l leveledLogger) Warnf(format string, v ...any) {
	l.log.Warn(redact(fmt.Sprintf(format, v...)))
}

func (l leveledLogger) Errorf(format string, v ...any) {
	l.log.Warn(redact(fmt.Sprintf(format, v...)))
}
