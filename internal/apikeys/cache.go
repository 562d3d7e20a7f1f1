package apikeys

import (
	"context"
	"crypto/sha256"
	"sync"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/clock"
)

// DefaultCacheTTL is how long an Authenticator trusts a key the database
// accepted: a revoked or replaced key stops working within it.
const DefaultCacheTTL = 10 * time.Second

// maxCached bounds the cache; when full it starts over.
const maxCached = 10_000

// Authenticator authenticates secrets like Authenticate, and remembers the
// keys the database accepted for TTL, so that a request needs no round trip
// for its API key. Unknown secrets are never remembered: each is asked
// again. Safe for concurrent use.
type Authenticator struct {
	db    Querier
	clock clock.Clock
	ttl   time.Duration

	mu    sync.Mutex
	known map[[sha256.Size]byte]cached
}

type cached struct {
	tenant string
	until  time.Time
}

// NewAuthenticator returns an Authenticator; ttl <= 0 means DefaultCacheTTL.
func NewAuthenticator(db Querier, clk clock.Clock, ttl time.Duration) *Authenticator {
	if ttl <= 0 {
		ttl = DefaultCacheTTL
	}
	return &Authenticator{db: db, clock: clk, ttl: ttl, known: map[[sha256.Size]byte]cached{}}
}

// Authenticate returns the tenant whose secret this is, or ErrUnknownKey.
func (a *Authenticator) Authenticate(ctx context.Context, secret string) (string, error) {
	key := sha256.Sum256([]byte(secret))
	now := a.clock.Now()
	a.mu.Lock()
	c, ok := a.known[key]
	a.mu.Unlock()
	if ok && now.Before(c.until) {
		return c.tenant, nil
	}
	tenant, err := Authenticate(ctx, a.db, secret)
	if err != nil {
		return "", err
	}
	a.mu.Lock()
	if len(a.known) >= maxCached {
		clear(a.known)
	}
	a.known[key] = cached{tenant: tenant, until: now.Add(a.ttl)}
	a.mu.Unlock()
	return tenant, nil
}
