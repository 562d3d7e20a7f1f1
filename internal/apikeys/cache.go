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
// again. Requests with the same secret that find nothing remembered wait
// for one lookup rather than each making their own: when a busy key's
// entry runs out, a thousand requests in flight would otherwise send a
// thousand queries, and a thousand updates of its last use to one row.
// Safe for concurrent use.
type Authenticator struct {
	db     Querier
	hasher Hasher
	clock  clock.Clock
	ttl    time.Duration

	mu      sync.Mutex
	known   map[[sha256.Size]byte]cached
	looking map[[sha256.Size]byte]*lookup
}

type cached struct {
	id    Identity
	until time.Time
}

// lookup is one database lookup of a secret, which the requests that came
// while it ran wait for (done closes when id and err are set).
type lookup struct {
	done chan struct{}
	id   Identity
	err  error
}

// NewAuthenticator returns an Authenticator; ttl <= 0, or above
// MaxCacheTTL, means MaxCacheTTL.
func NewAuthenticator(db Querier, h Hasher, clk clock.Clock, ttl time.Duration) *Authenticator {
	if ttl <= 0 || ttl > MaxCacheTTL {
		ttl = MaxCacheTTL
	}
	return &Authenticator{db: db, hasher: h, clock: clk, ttl: ttl,
		known: map[[sha256.Size]byte]cached{}, looking: map[[sha256.Size]byte]*lookup{}}
}

// Authenticate returns the identity of the key whose secret this is, or
// ErrUnknownKey.
func (a *Authenticator) Authenticate(ctx context.Context, secret string) (Identity, error) {
	key := sha256.Sum256([]byte(secret))
	now := a.clock.Now()
	a.mu.Lock()
	if c, ok := a.known[key]; ok && now.Before(c.until) {
		a.mu.Unlock()
		return c.id, nil
	}
	if l, ok := a.looking[key]; ok {
		a.mu.Unlock()
		select {
		case <-l.done:
			return l.id, l.err
		case <-ctx.Done():
			return Identity{}, ctx.Err()
		}
	}
	l := &lookup{done: make(chan struct{})}
	a.looking[key] = l
	a.mu.Unlock()

	// The lookup is shared, so one request going away must not fail the
	// others waiting for it.
	l.id, l.err = Authenticate(context.WithoutCancel(ctx), a.db, a.hasher, secret, now)
	a.mu.Lock()
	delete(a.looking, key)
	if l.err == nil {
		if len(a.known) >= maxCached {
			clear(a.known)
		}
		a.known[key] = cached{id: l.id, until: now.Add(a.ttl)}
	}
	a.mu.Unlock()
	close(l.done)
	return l.id, l.err
}
