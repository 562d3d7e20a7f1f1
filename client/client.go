package client

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/paymentsapi/paymentsapi/client/internal/apigen"
)

// Config configures a Client. Only BaseURL is required.
type Config struct {
	// BaseURL is where the API listens, such as http://localhost:8080.
	BaseURL string
	// APIKey is the tenant's secret, sent as Authorization: Bearer.
	APIKey string
	// HTTPClient sends the requests. Default: a new http.Client with no
	// overall timeout (RetryPolicy.AttemptTimeout bounds each attempt).
	HTTPClient *http.Client
	// Retry is the retry policy; zero fields take DefaultRetryPolicy's.
	Retry RetryPolicy
	// PreferWait, when positive, sends Prefer: wait=N (N in whole seconds,
	// rounded up; the server caps it at 10) with every create, capture and
	// cancel, unless the call says otherwise with WithPreferWait.
	PreferWait time.Duration
	// UserAgent is sent as User-Agent when set.
	UserAgent string
	// Clock and Rand drive the waits and their jitter; Rand returns a
	// uniform number in [0, 1). Defaults: the wall clock, math/rand/v2.
	// Tests set them to run the retry policy without waiting.
	Clock Clock
	Rand  func() float64
}

// Client calls the payments API with the retry policy of its Config. It is
// safe for concurrent use; all its calls share one retry budget, so use one
// Client per process and API rather than one per call.
type Client struct {
	raw        *apigen.Client
	apiKey     string
	userAgent  string
	policy     RetryPolicy
	budget     *retryBudget
	preferWait time.Duration
	clock      Clock
	rand       func() float64
}

// New returns a Client for cfg.
func New(cfg Config) (*Client, error) {
	u, err := url.Parse(cfg.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("client: BaseURL %q is not an http(s) URL", cfg.BaseURL)
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{}
	}
	// The generated calls resolve their paths against the base URL: keep
	// its path (a prefix behind a proxy) by ending it with a slash.
	raw, err := apigen.NewClient(strings.TrimRight(cfg.BaseURL, "/")+"/", apigen.WithHTTPClient(hc))
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	policy := cfg.Retry.withDefaults()
	c := &Client{
		raw: raw, apiKey: cfg.APIKey, userAgent: cfg.UserAgent, policy: policy,
		budget: newRetryBudget(policy.Budget), preferWait: cfg.PreferWait,
		clock: cfg.Clock, rand: cfg.Rand,
	}
	if c.clock == nil {
		c.clock = systemClock{}
	}
	if c.rand == nil {
		c.rand = defaultRand
	}
	return c, nil
}

// NewIdempotencyKey returns a fresh random key (a version 4 UUID), as the
// creates generate when the call has none. Generate it yourself and store
// it before calling when a retry must survive your process.
func NewIdempotencyKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// CallOption changes one idempotent call (a create, a capture, a cancel).
type CallOption func(*callOptions)

type callOptions struct {
	key        string
	preferWait time.Duration
}

// WithIdempotencyKey makes the call use key, on every attempt, instead of
// a generated one. Use it to retry an operation begun earlier.
func WithIdempotencyKey(key string) CallOption {
	return func(o *callOptions) { o.key = key }
}

// WithPreferWait sends Prefer: wait=N (d in whole seconds, rounded up; zero
// or less sends none) with every attempt of the call: a retry that finds
// the original still in flight is held up to N seconds for it to finish.
func WithPreferWait(d time.Duration) CallOption {
	return func(o *callOptions) { o.preferWait = max(d, 0) }
}

func (c *Client) callOptions(opts []CallOption) callOptions {
	o := callOptions{preferWait: c.preferWait}
	for _, opt := range opts {
		opt(&o)
	}
	if o.key == "" {
		o.key = NewIdempotencyKey()
	}
	return o
}

// prefer is the Prefer header of o, "" for none.
func (o callOptions) prefer() string {
	if o.preferWait <= 0 {
		return ""
	}
	return "wait=" + strconv.FormatInt(int64((o.preferWait+time.Second-1)/time.Second), 10)
}

// Outcome tells how an idempotent call (a create, a capture, a cancel)
// ended.
type Outcome struct {
	// StatusCode is 201 (created), 200 (captured, canceled), or 202: the
	// outcome was still unknown after the last attempt (see
	// StillProcessing).
	StatusCode int
	// Replayed is true when the answer was the stored answer to an earlier
	// attempt with the same key.
	Replayed bool
	// IdempotencyKey is the key every attempt carried.
	IdempotencyKey string
	// Attempts is how many attempts were made. (net/http may resend a
	// request that carries an Idempotency-Key once by itself, when a
	// kept-alive connection turns out closed before it answered; that
	// resend, under the same key, is not counted.)
	Attempts int
	// Location is the resource's URL path.
	Location string
	// RetryAfter is the server's advice, with a 202, before asking again.
	RetryAfter time.Duration

	// accepted marks a call whose 202 is its final answer (ResendEvent:
	// the resend is queued), not an outcome still unknown.
	accepted bool
}

// StillProcessing reports a 202 whose outcome is not known yet (the
// provider's, for a create, a capture or a cancel). It is not a failure:
// money may have moved. Retry with the same key (Outcome.IdempotencyKey)
// or Get the resource later to learn the outcome. A resend's 202 is its
// answer, not this.
func (o Outcome) StillProcessing() bool { return o.StatusCode == http.StatusAccepted && !o.accepted }

// PaymentResult is the answer to CreatePayment, CapturePayment and
// CancelPayment: the payment as the call left it.
type PaymentResult struct {
	Payment Payment
	Outcome
}

// RefundResult is the answer to CreateRefund.
type RefundResult struct {
	Refund Refund
	Outcome
}

// CreatePayment creates a payment, retrying under one idempotency key.
// A decline is a *DeclinedError; see the package documentation for the
// rest.
func (c *Client) CreatePayment(ctx context.Context, req CreatePaymentRequest, opts ...CallOption) (*PaymentResult, error) {
	o := c.callOptions(opts)
	params := &apigen.CreatePaymentParams{IdempotencyKey: o.key, Prefer: o.prefer()}
	return c.paymentCall(ctx, "POST /payments", o, func(ctx context.Context) (*http.Response, error) {
		return c.raw.CreatePayment(ctx, params, req, c.edit)
	})
}

// GetPayment returns the payment's current representation.
func (c *Client) GetPayment(ctx context.Context, paymentID string) (*Payment, error) {
	return get[Payment](ctx, c, "GET /payments/"+paymentID, func(ctx context.Context) (*http.Response, error) {
		return c.raw.GetPayment(ctx, paymentID, c.edit)
	})
}

// ListPayments returns one page of the tenant's payments, newest first.
// Pass the page's NextCursor as params.Cursor for the next one.
func (c *Client) ListPayments(ctx context.Context, params ListPaymentsParams) (*PaymentList, error) {
	return get[PaymentList](ctx, c, "GET /payments", func(ctx context.Context) (*http.Response, error) {
		return c.raw.ListPayments(ctx, params.generated(), c.edit)
	})
}

// CreateRefund refunds req.Amount of a succeeded payment, retrying under
// one idempotency key (its own scope: a payment's key is another
// operation). A declined refund is a *DeclinedError.
func (c *Client) CreateRefund(ctx context.Context, paymentID string, req CreateRefundRequest, opts ...CallOption) (*RefundResult, error) {
	o := c.callOptions(opts)
	params := &apigen.CreateRefundParams{IdempotencyKey: o.key, Prefer: o.prefer()}
	r, out, err := create[Refund](ctx, c, "POST /payments/"+paymentID+"/refunds", o, func(ctx context.Context) (*http.Response, error) {
		return c.raw.CreateRefund(ctx, paymentID, params, req, c.edit)
	})
	if err != nil {
		return nil, err
	}
	return &RefundResult{Refund: *r, Outcome: out}, nil
}

// CapturePayment captures a REQUIRES_CAPTURE payment (one created with
// CaptureMethod CaptureManual): all of its capturable amount, or
// req.Amount of it. It retries under one idempotency key (its own scope).
// A capture the provider declined is a *DeclinedError (CAPTURE_DECLINED);
// a payment that cannot be captured is an *Error with its Code
// (PAYMENT_NOT_CAPTURABLE, CAPTURE_EXCEEDS_CAPTURABLE,
// AUTHORIZATION_EXPIRED).
func (c *Client) CapturePayment(ctx context.Context, paymentID string, req CapturePaymentRequest, opts ...CallOption) (*PaymentResult, error) {
	o := c.callOptions(opts)
	params := &apigen.CapturePaymentParams{IdempotencyKey: o.key, Prefer: o.prefer()}
	return c.paymentCall(ctx, "POST /payments/"+paymentID+"/capture", o, func(ctx context.Context) (*http.Response, error) {
		return c.raw.CapturePayment(ctx, paymentID, params, req, c.edit)
	})
}

// CancelPayment cancels a payment: it voids a REQUIRES_CAPTURE payment's
// authorization, or cancels a payment that moved no money. It retries under
// one idempotency key (its own scope). A payment that cannot be canceled
// is an *Error with Code PAYMENT_NOT_CANCELABLE.
func (c *Client) CancelPayment(ctx context.Context, paymentID string, req CancelPaymentRequest, opts ...CallOption) (*PaymentResult, error) {
	o := c.callOptions(opts)
	params := &apigen.CancelPaymentParams{IdempotencyKey: o.key, Prefer: o.prefer()}
	return c.paymentCall(ctx, "POST /payments/"+paymentID+"/cancel", o, func(ctx context.Context) (*http.Response, error) {
		return c.raw.CancelPayment(ctx, paymentID, params, req, c.edit)
	})
}

// paymentCall runs an idempotent call that answers with the payment.
func (c *Client) paymentCall(ctx context.Context, op string, o callOptions, send func(context.Context) (*http.Response, error)) (*PaymentResult, error) {
	p, out, err := create[Payment](ctx, c, op, o, send)
	if err != nil {
		return nil, err
	}
	return &PaymentResult{Payment: *p, Outcome: out}, nil
}

// GetRefund returns the refund's current representation.
func (c *Client) GetRefund(ctx context.Context, paymentID, refundID string) (*Refund, error) {
	return get[Refund](ctx, c, "GET /payments/"+paymentID+"/refunds/"+refundID, func(ctx context.Context) (*http.Response, error) {
		return c.raw.GetRefund(ctx, paymentID, refundID, c.edit)
	})
}

// ListRefunds returns the refunds of a payment.
func (c *Client) ListRefunds(ctx context.Context, paymentID string) (*RefundList, error) {
	return get[RefundList](ctx, c, "GET /payments/"+paymentID+"/refunds", func(ctx context.Context) (*http.Response, error) {
		return c.raw.ListRefunds(ctx, paymentID, c.edit)
	})
}

// create runs an idempotent call (a create, a capture, a cancel) under o's
// key and decodes its resource.
func create[T any](ctx context.Context, c *Client, op string, o callOptions, send func(context.Context) (*http.Response, error)) (*T, Outcome, error) {
	return idempotent[T](ctx, c, exchange{op: op, create: true, key: o.key, wait: o.preferWait, send: send})
}

// idempotent runs x, an idempotent call under a key, and decodes its
// resource.
func idempotent[T any](ctx context.Context, c *Client, x exchange) (*T, Outcome, error) {
	a, out, err := c.run(ctx, x)
	if err != nil {
		return nil, out, err
	}
	var v T
	return &v, out, decodeInto(x.op, a, &v)
}

// get runs a read and decodes its resource.
func get[T any](ctx context.Context, c *Client, op string, send func(context.Context) (*http.Response, error)) (*T, error) {
	a, _, err := c.run(ctx, exchange{op: op, send: send})
	if err != nil {
		return nil, err
	}
	var v T
	return &v, decodeInto(op, a, &v)
}

// edit adds the credentials to every request and drops an empty Prefer.
func (c *Client) edit(_ context.Context, req *http.Request) error {
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	if c.userAgent != "" {
		req.Header.Set("User-Agent", c.userAgent)
	}
	if req.Header.Get("Prefer") == "" {
		req.Header.Del("Prefer")
	}
	return nil
}

// exchange is one logical call: send makes one attempt.
type exchange struct {
	op     string
	create bool // an idempotent call under a key: a 202 and 409 IDEMPOTENCY_KEY_IN_USE are retried
	// accepted says that a 202 is the call's answer (a resend queued),
	// not an outcome still unknown: it is not retried.
	accepted bool
	key      string
	wait     time.Duration // Prefer: wait, added to the attempt's timeout
	send     func(ctx context.Context) (*http.Response, error)
}

// answer is an HTTP answer, read whole.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// maxAnswerBytes bounds the body of an answer.
const maxAnswerBytes = 1 << 20

// run makes the attempts of x under the retry policy. It returns the last
// answer when it is a 2xx (a 202 included), else the error that ended the
// call.
func (c *Client) run(ctx context.Context, x exchange) (*answer, Outcome, error) {
	c.budget.call()
	out := Outcome{IdempotencyKey: x.key, accepted: x.accepted}
	for {
		out.Attempts++
		a, err := c.attempt(ctx, x)
		var (
			failure   error // what the call ends with if this was the last attempt
			retryable bool
			advised   time.Duration
		)
		switch {
		case err != nil && ctx.Err() != nil:
			return nil, out, c.wrap(x, out, err)
		case err != nil:
			failure, retryable = err, true
		case a.status >= 200 && a.status < 300:
			out.StatusCode = a.status
			out.Replayed = a.header.Get("Idempotent-Replayed") == "true"
			out.Location = a.header.Get("Location")
			out.RetryAfter = parseRetryAfter(a.header.Get("Retry-After"), c.clock.Now())
			if a.status != http.StatusAccepted || !x.create || x.accepted {
				return a, out, nil
			}
			retryable, advised = true, out.RetryAfter
		default:
			p := decodeProblem(a.status, a.header, a.body, parseRetryAfter(a.header.Get("Retry-After"), c.clock.Now()))
			failure, advised = p, p.RetryAfter
			if a.status == http.StatusPaymentRequired {
				failure = &DeclinedError{Problem: p}
			}
			retryable = retryableAnswer(x.create, a.header, p)
		}
		if !retryable {
			return nil, out, c.wrap(x, out, failure)
		}
		delay, stop := c.nextDelay(ctx, out.Attempts, advised)
		if stop == nil {
			stop = c.clock.Sleep(ctx, delay)
		}
		if stop != nil {
			if failure == nil { // a 202: still processing is a result
				return a, out, nil
			}
			return nil, out, c.wrap(x, out, fmt.Errorf("%w; last answer: %w", stop, failure))
		}
	}
}

// errNoMoreAttempts ends a call that used all its attempts.
var errNoMoreAttempts = errors.New("no attempts left")

// nextDelay returns how long to wait before the retry that follows attempt
// n, or why there is none: no attempts left, a Retry-After beyond
// MaxRetryAfter, the context's deadline before the retry, an empty budget.
func (c *Client) nextDelay(ctx context.Context, n int, advised time.Duration) (time.Duration, error) {
	p := c.policy
	if n >= p.MaxAttempts {
		return 0, errNoMoreAttempts
	}
	if advised > p.MaxRetryAfter {
		return 0, fmt.Errorf("the server asks to wait %s, more than %s", advised, p.MaxRetryAfter)
	}
	delay := max(p.backoff(n, c.rand()), advised)
	if deadline, ok := ctx.Deadline(); ok && !c.clock.Now().Add(delay).Before(deadline) {
		return 0, fmt.Errorf("the next attempt (in %s) would start after the deadline: %w", delay, context.DeadlineExceeded)
	}
	if !c.budget.retry() {
		return 0, ErrBudgetExhausted
	}
	return delay, nil
}

// attempt sends one request and reads its answer.
func (c *Client) attempt(ctx context.Context, x exchange) (*answer, error) {
	ctx, cancel := context.WithTimeout(ctx, c.policy.AttemptTimeout+x.wait)
	defer cancel()
	resp, err := x.send(ctx)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		return nil, fmt.Errorf("read the %d answer: %w", resp.StatusCode, err)
	}
	return &answer{status: resp.StatusCode, header: resp.Header, body: body}, nil
}

// wrap names the call in err.
func (c *Client) wrap(x exchange, out Outcome, err error) error {
	attempts := "1 attempt"
	if out.Attempts != 1 {
		attempts = fmt.Sprintf("%d attempts", out.Attempts)
	}
	if x.key == "" {
		return fmt.Errorf("%s (%s): %w", x.op, attempts, err)
	}
	return fmt.Errorf("%s (Idempotency-Key %s, %s): %w", x.op, x.key, attempts, err)
}

// decodeInto decodes a 2xx answer's JSON body into v.
func decodeInto(op string, a *answer, v any) error {
	if err := json.Unmarshal(a.body, v); err != nil {
		return fmt.Errorf("%s: decode the %d answer: %w", op, a.status, err)
	}
	return nil
}
