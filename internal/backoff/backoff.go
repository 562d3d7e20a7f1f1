// Package backoff is the one definition of how this service spaces retries
// of its own work: the outbox relay, the reconciler and the LISTEN
// connection all wait by it.
package backoff

import (
	"math/rand/v2"
	"time"
)

// Policy is an exponential backoff: the first wait is Base, each next one
// doubles, up to Max. Jitter spreads each wait over [d/2, d], so that rows,
// keys or instances that failed together do not retry together.
type Policy struct {
	Base time.Duration
	Max  time.Duration
}

// Ceiling is the n-th wait (n >= 1) before jitter: Base·2^(n-1), capped at Max.
func (p Policy) Ceiling(n int) time.Duration {
	d := p.Base
	for i := 1; i < n && d < p.Max; i++ {
		d *= 2
	}
	return min(d, p.Max)
}

// Delay is the n-th wait (n >= 1), jittered into [d/2, d].
func (p Policy) Delay(n int) time.Duration {
	d := p.Ceiling(n)
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}

// Schedule is the waits of attempts 1..n, each jittered: what a SQL
// statement that books the next attempt needs when the attempt count lives
// in the database (element i is the wait after attempt i+1; use the last for
// every later attempt).
func (p Policy) Schedule(n int) []time.Duration {
	s := make([]time.Duration, n)
	for i := range s {
		s[i] = p.Delay(i + 1)
	}
	return s
}
