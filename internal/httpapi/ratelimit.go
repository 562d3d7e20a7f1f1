package httpapi

import (
	"math"
	"net/http"
	"sync"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/problem"
)

// RateLimit is the per-tenant request rate limit (RATE_LIMIT,
// RATE_LIMIT_BURST): a token bucket per tenant, held in this server's
// memory. It is per instance: behind N instances a tenant may send N times
// the rate.
type RateLimit struct {
	// PerSecond is the sustained rate of requests per tenant; 0 turns the
	// limit off.
	PerSecond float64
	// Burst is how many requests a tenant may send at once from a full
	// bucket; 0 means one second's worth (PerSecond rounded up, at least 1).
	Burst int
}

// limiter holds one server's buckets, one per tenant seen. Only
// authenticated tenants get a bucket, so there are as many as there are
// tenants with API keys.
type limiter struct {
	rate, burst float64
	clock       clock.Clock

	mu      sync.Mutex
	buckets map[string]*bucket
}

// bucket is a tenant's tokens as of at.
type bucket struct {
	tokens float64
	at     time.Time
}

// newLimiter returns the limiter of c on clk, or nil when c turns the limit
// off.
func newLimiter(c RateLimit, clk clock.Clock) *limiter {
	if !(c.PerSecond > 0) || math.IsInf(c.PerSecond, 1) {
		return nil
	}
	burst := float64(c.Burst)
	if c.Burst <= 0 {
		burst = max(1, math.Ceil(c.PerSecond))
	}
	return &limiter{rate: c.PerSecond, burst: burst, clock: clk, buckets: map[string]*bucket{}}
}

// take takes a token from tenant's bucket, refilled at the rate since it was
// last taken from. Without a whole token it takes nothing and says how long
// until there is one.
func (l *limiter) take(tenant string) (ok bool, wait time.Duration) {
	now := l.clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[tenant]
	if b == nil {
		b = &bucket{tokens: l.burst, at: now}
		l.buckets[tenant] = b
	}
	if elapsed := now.Sub(b.at); elapsed > 0 { // a clock set back refills nothing
		b.tokens = min(l.burst, b.tokens+elapsed.Seconds()*l.rate)
		b.at = now
	}
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	return false, time.Duration((1 - b.tokens) / l.rate * float64(time.Second))
}

// limitRate answers 429 RATE_LIMITED, with Retry-After, to a tenant over its
// rate. It runs after authentication (it needs the tenant) and before the
// handlers: a limited request reaches neither the idempotency engine nor the
// database, so nothing is recorded for its key and a retry is a new request.
// A nil limiter lets every request through.
func limitRate(l *limiter) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		if l == nil {
			return next
		}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if ok, wait := l.take(tenantOf(r.Context())); !ok {
				w.Header().Set("Retry-After", retryAfterValue(wait))
				problem.New(http.StatusTooManyRequests, problem.RateLimited,
					"This tenant sent more requests than its rate limit allows. Nothing was recorded: "+
						"retry the same request, with the same Idempotency-Key, after Retry-After seconds.").Write(w)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}
