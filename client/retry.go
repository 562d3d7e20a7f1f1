package client

import (
	"context"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// RetryPolicy says when and how often a Client retries. Zero fields take
// the defaults of DefaultRetryPolicy.
type RetryPolicy struct {
	// MaxAttempts bounds the attempts of one call, the first included: 1
	// never retries.
	MaxAttempts int
	// BaseDelay and MaxDelay shape the backoff: before retry n (n = 1, 2,
	// ...) the client waits a uniformly random time in
	// [0, min(MaxDelay, BaseDelay·2^(n-1))) ("full jitter"), or the
	// server's Retry-After if that is longer.
	BaseDelay time.Duration
	MaxDelay  time.Duration
	// MaxRetryAfter is the longest Retry-After the client waits for; an
	// answer asking for more ends the call with that answer.
	MaxRetryAfter time.Duration
	// AttemptTimeout bounds one attempt (Prefer: wait is added to it). An
	// attempt that runs out counts as a network error and is retried.
	AttemptTimeout time.Duration
	// Budget limits the retries of all calls of a Client together.
	Budget Budget
}

// Budget is a token bucket shared by all calls of one Client: each call
// adds Ratio tokens (up to Burst), each retry takes one, and a retry that
// finds less than one token is not made. Over time retries are therefore at
// most Ratio of the calls, plus Burst; a new Client starts with Burst tokens
// so that a short-lived program (a command line) can still retry.
type Budget struct {
	Ratio float64
	Burst float64
}

// DefaultRetryPolicy returns the policy of a Client whose Config leaves
// Retry zero:
//
//   - 5 attempts: four retries cover a restart or a failover of a few
//     seconds, and the 409 of a provider call still in flight.
//   - 250 ms base delay, 5 s cap: the waits before retries 1 to 4 are at
//     most 0.25, 0.5, 1 and 2 s, so a call gives up within seconds plus
//     the server's Retry-After, well inside the 24 h replay window.
//   - Retry-After up to 30 s is honoured; a longer one ends the call.
//   - 30 s per attempt: more than the server needs for a create (two
//     provider calls of PROVIDER_TIMEOUT, 5 s each by default).
//   - Budget 10% with a burst of 10: in an outage the fleet's retries add at
//     most a tenth to the load, while one program can still retry a few
//     calls in full.
func DefaultRetryPolicy() RetryPolicy {
	return RetryPolicy{
		MaxAttempts:    5,
		BaseDelay:      250 * time.Millisecond,
		MaxDelay:       5 * time.Second,
		MaxRetryAfter:  30 * time.Second,
		AttemptTimeout: 30 * time.Second,
		Budget:         Budget{Ratio: 0.1, Burst: 10},
	}
}

// withDefaults fills the zero fields of p from DefaultRetryPolicy.
func (p RetryPolicy) withDefaults() RetryPolicy {
	d := DefaultRetryPolicy()
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = d.MaxAttempts
	}
	if p.BaseDelay <= 0 {
		p.BaseDelay = d.BaseDelay
	}
	if p.MaxDelay <= 0 {
		p.MaxDelay = d.MaxDelay
	}
	if p.MaxRetryAfter <= 0 {
		p.MaxRetryAfter = d.MaxRetryAfter
	}
	if p.AttemptTimeout <= 0 {
		p.AttemptTimeout = d.AttemptTimeout
	}
	if p.Budget.Ratio <= 0 && p.Budget.Burst <= 0 {
		p.Budget = d.Budget
	}
	return p
}

// backoff is the full-jitter delay before retry n (n >= 1): uniform in
// [0, min(MaxDelay, BaseDelay·2^(n-1))), with r uniform in [0, 1).
func (p RetryPolicy) backoff(n int, r float64) time.Duration {
	ceiling := p.BaseDelay
	for i := 1; i < n && ceiling < p.MaxDelay; i++ {
		ceiling *= 2
	}
	ceiling = min(ceiling, p.MaxDelay)
	return time.Duration(r * float64(ceiling))
}

// retryBudget is the token bucket of a Budget, counted in thousandths of
// a token so that a ratio such as 0.1 adds up exactly.
type retryBudget struct {
	mu     sync.Mutex
	tokens int64
	ratio  int64
	burst  int64
}

// milliTokens is one token.
const milliTokens = 1000

func newRetryBudget(b Budget) *retryBudget {
	burst := int64(math.Round(max(b.Burst, 0) * milliTokens))
	return &retryBudget{tokens: burst, ratio: int64(math.Round(max(b.Ratio, 0) * milliTokens)), burst: burst}
}

// call credits the budget for one call.
func (b *retryBudget) call() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.tokens = min(b.burst, b.tokens+b.ratio)
}

// retry takes one token for a retry; false when there is none.
func (b *retryBudget) retry() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.tokens < milliTokens {
		return false
	}
	b.tokens -= milliTokens
	return true
}

// ShouldRetryHeader is the header with which the server says whether an
// error answer may be retried: "true" or "false".
const ShouldRetryHeader = "Payments-Should-Retry"

// retryableAnswer decides whether an error answer (p, with its header h)
// may be retried; create says the call is idempotent under a key. The
// server knows what the client cannot (that the answer is a stored final
// one, that a 5xx moved nothing and will not change), so its
// Payments-Should-Retry decides when it sent one: "false" ends the call,
// even on a 5xx, and "true" allows a retry, still within the attempts,
// the budget and the deadline. Without it (an older server, a proxy's
// page) the contract's rule decides: 5xx, 429, and for a call under a key
// 409 IDEMPOTENCY_KEY_IN_USE; never another 4xx.
func retryableAnswer(create bool, h http.Header, p *Error) bool {
	switch strings.ToLower(strings.TrimSpace(h.Get(ShouldRetryHeader))) {
	case "true":
		return true
	case "false":
		return false
	}
	return p.Status >= 500 || p.Status == http.StatusTooManyRequests ||
		(create && p.Status == http.StatusConflict && p.Code == CodeIdempotencyKeyInUse)
}

// Clock is the time of a Client's retry policy: Now for deadlines and
// Retry-After dates, Sleep for the waits between attempts. Tests replace it
// to run the policy without waiting.
type Clock interface {
	Now() time.Time
	// Sleep waits for d, or until ctx is done and then returns ctx.Err().
	Sleep(ctx context.Context, d time.Duration) error
}

// systemClock is the wall clock.
type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// defaultRand is uniform in [0, 1).
func defaultRand() float64 { return rand.Float64() }

// parseRetryAfter reads Retry-After in either form (RFC 9110): seconds, or
// an HTTP date measured from now. Zero when absent or unreadable.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n <= 0 {
			return 0
		}
		return time.Duration(min(n, int64(365*24*time.Hour/time.Second))) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}
