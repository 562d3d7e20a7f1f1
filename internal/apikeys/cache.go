package apikeys

import (
	"context"
	"crypto/sha256"
	"sync"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/clock"
)

// MaxCacheTTL is the longest an Authenticator trusts a key the database
// accepted, whatever it is asked: a revoked key must stop working on every
// instance within it.
const MaxCacheTTL = 10 * time.Second

// maxCached bounds the cache; when full it starts over.
const maxCached = 10_000

// Authenticator authenticates secrets like Authenticate, and remembers the
// keys the database accepted for TTL, so that a request needs no round trip
// for its API key. Unknown secrets are never remembered: each is asked
// again. Safe for concurrent use.
type Authenticator struct {
	db     Querier
	hasher Hasher
	clock  clock.Clock
	ttl    time.Duration

	mu    sync.Mutex
	known map[[sha256.Size]byte]cached
}

type cached struct {
	id    Identity
	until time.Time
}

// NewAuthenticator returns an Authenticator; ttl <= 0, or above
// MaxCacheTTL, means MaxCacheTTL.
func NewAuthenticator(db Querier, h Hasher, clk clock.Clock, ttl time.Duration) *Authenticator {
	if ttl <= 0 || ttl > MaxCacheTTL {
		ttl = MaxCacheTTL
	}
	return &Authenticator{db: db, hasher: h, clock: clk, ttl: ttl, known: map[[sha256.Size]byte]cached{}}
}

// Authenticate returns the identity of the key whose secret this is, or
// ErrUnknownKey.
func (a *Authenticator) Authenticate(ctx context.Context, secret string) (Identity, error) {
	key := sha256.Sum256([]byte(secret))
	now := a.clock.Now()
	a.mu.Lock()
	c, ok := a.known[key]
	a.mu.Unlock()
	if ok && now.Before(c.until) {
		return c.id, nil
	}
	id, err := Authenticate(ctx, a.db, a.hasher, secret, now)
	if err != nil {
		return Identity{}, err
	}
	a.mu.Lock()
	if len(a.known) >= maxCached {
		clear(a.known)
	}
	a.known[key] = cached{id: id, until: now.Add(a.ttl)}
	a.mu.Unlock()
	return id, nil
}
