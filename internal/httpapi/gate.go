package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/actor"
	"github.com/paymentsapi/paymentsapi/internal/apikeys"
	"github.com/paymentsapi/paymentsapi/internal/metrics"
	"github.com/paymentsapi/paymentsapi/internal/operators"
)

// DashboardPath is where the dashboard (Deps.Dashboard) is mounted.
const DashboardPath = "/dashboard"

// Gate is the API's own authentication, handed to the service's other
// front door, the dashboard's login form, so that it is no side door: the
// same operators' keys, the same cached authenticator of API keys (a
// revoked key stops within apikeys.MaxCacheTTL there too), and the same
// throttle of failed authentications, whose counts the two doors share.
type Gate struct {
	keys      *apikeys.Authenticator
	operators operators.Keys
	throttle  *authThrottle
	metrics   *metrics.Metrics
	addrs     clientAddresses
}

// Who is whom a secret authenticated: an operator (Operator is set), or a
// tenant's API key.
type Who struct {
	Operator string
	apikeys.Identity
}

// Actor is who acts, as the audit names it (package actor).
func (w Who) Actor() string {
	if w.Operator != "" {
		return actor.Operator(w.Operator)
	}
	return actor.API(w.KeyID)
}

// ThrottledError: the address failed authentication too often; nothing is
// looked at until Wait has passed.
type ThrottledError struct{ Wait time.Duration }

func (e *ThrottledError) Error() string {
	return fmt.Sprintf("this address failed authentication too many times; try again in %s", e.Wait.Round(time.Second))
}

// ErrUnknownSecret: the secret is neither an operator's nor an active API
// key's.
var ErrUnknownSecret = errors.New("the secret is neither an operator's key nor an active API key")

// Login authenticates a secret r's client typed: refused with a
// *ThrottledError while r's address is throttled; an unknown secret counts
// as one failure of the address, as on the API.
func (g Gate) Login(r *http.Request, secret string) (Who, error) {
	addr := clientAddr(r)
	if wait, refused := g.throttle.refused(addr); refused {
		return Who{}, &ThrottledError{Wait: wait}
	}
	who, err := g.Recheck(r.Context(), strings.TrimSpace(secret))
	if errors.Is(err, ErrUnknownSecret) {
		g.throttle.fail(addr)
		g.metrics.AuthFailures.Inc()
	}
	return who, err
}

// Recheck authenticates a secret a Login accepted earlier, without the
// throttle: whether it still works. Operators' keys are tried first, as
// on GET /audit-events.
func (g Gate) Recheck(ctx context.Context, secret string) (Who, error) {
	if secret == "" {
		return Who{}, ErrUnknownSecret
	}
	if name, ok := g.operators.Authenticate(secret); ok {
		return Who{Operator: name}, nil
	}
	id, err := g.keys.Authenticate(ctx, secret)
	if errors.Is(err, apikeys.ErrUnknownKey) {
		return Who{}, ErrUnknownSecret
	}
	if err != nil {
		return Who{}, err
	}
	return Who{Identity: id}, nil
}

// HTTPS reports whether r reached the service over TLS, or through a
// trusted proxy (TRUSTED_PROXIES) that says its client used https
// (X-Forwarded-Proto): a cookie set on such a request is Secure.
func (g Gate) HTTPS(r *http.Request) bool {
	if r.TLS != nil {
		return true
	}
	return g.addrs.trustsPeer(r) && strings.EqualFold(strings.TrimSpace(r.Header.Get("X-Forwarded-Proto")), "https")
}

// ClientAddr is r's client address, as the logs and the throttle see it.
func (Gate) ClientAddr(r *http.Request) string { return clientAddr(r) }
