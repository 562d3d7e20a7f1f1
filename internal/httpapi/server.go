// Package httpapi is the HTTP adapter of the service: routing, middleware,
// request decoding and problem+json answers. It names no operation: each
// registered operation adds its own routes (operation.Instance.Routes),
// handled with the one API this package offers them (operation.HTTP), and
// renders its own results with ResourceResponse and ProblemResponse.
package httpapi

import (
	"context"
	"log/slog"
	"net/http"
	"net/netip"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/paymentsapi/paymentsapi/internal/apikeys"
	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/metrics"
	"github.com/paymentsapi/paymentsapi/internal/operation"
	"github.com/paymentsapi/paymentsapi/internal/operators"
)

// Deps is what the HTTP API needs.
type Deps struct {
	// Modules and Operations are the registered operations and their
	// built instances, in one order (internal/app).
	Modules    []operation.Module
	Operations []operation.Instance
	DB         *pgxpool.Pool
	Log        *slog.Logger
	Metrics    *metrics.Metrics
	Gatherer   prometheus.Gatherer
	OpenAPI    []byte
	// Ready reports whether the database is reachable and migrated.
	Ready func(ctx context.Context) error
	// RetryAfter is the service's one advice to come back later (the
	// engine's, idempotency.Engine.RetryAfter).
	RetryAfter time.Duration
	// APIKeys hashes API keys' secrets as they are stored (API_KEY_PEPPER);
	// the zero Hasher is the plain SHA-256.
	APIKeys apikeys.Hasher
	// RateLimit limits each tenant's requests; the zero value is off.
	RateLimit RateLimit
	// Clock is the time source (the system clock when nil).
	Clock clock.Clock
	// StripeWebhooks handles POST /webhooks/stripe (internal/webhooks);
	// nil: the route does not exist (404).
	StripeWebhooks http.Handler
	// TrustedProxies are the networks of the proxies whose X-Forwarded-For
	// names the client (TRUSTED_PROXIES); none: the connection's peer is.
	TrustedProxies []netip.Prefix
	// Operators are the operators' keys (OPERATOR_KEYS): only they may
	// read the audit log, GET /audit-events.
	Operators operators.Keys
	// Features add the routes of the service's features that are not
	// operations (the event log), behind the same authentication, rate
	// limit and middleware as the operations' routes.
	Features []func(r chi.Router, api operation.HTTP)
	// Dashboard, when set, makes the web UI (package dashboard) that is
	// mounted at DashboardPath, handed the API's own authentication.
	Dashboard func(Gate) http.Handler
	// SeparateOps: the operations endpoints only an operator reads
	// (/metrics) are served by OpsHandler on a listener of their own
	// (OPS_ADDR), and not by NewServer's handler.
	SeparateOps bool
}

// MaxHeaderBytes is the most a request's line and headers may take; past
// it the server answers 431 Request Header Fields Too Large, before any
// handler runs.
const MaxHeaderBytes = 32 << 10

// ServerMaxHeaderBytes is the http.Server.MaxHeaderBytes that makes
// net/http answer 431 past MaxHeaderBytes: it reads 4096 bytes more than
// its setting before it gives up on a request's headers.
const ServerMaxHeaderBytes = MaxHeaderBytes - 4096

func (d Deps) clock() clock.Clock {
	if d.Clock == nil {
		return clock.System{}
	}
	return d.Clock
}

// NewServer returns the handler of the whole API.
func NewServer(d Deps) http.Handler {
	r := chi.NewRouter()
	addRoutes(r, d)
	return r
}

// OpsHandler returns the handler of the operations listener (OPS_ADDR):
// /metrics, and /healthz and /readyz for probes that should not cross the
// public listener.
func OpsHandler(d Deps) http.Handler {
	r := chi.NewRouter()
	r.NotFound(handleNotFound())
	r.Get("/healthz", handleHealthz())
	r.Get("/readyz", handleReadyz(d.Ready))
	r.Method("GET", "/metrics", metricsHandler(d))
	return r
}
