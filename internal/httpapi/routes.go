package httpapi

import (
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/paymentsapi/paymentsapi/internal/apikeys"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/paymentsapi/paymentsapi/internal/apidocs"
)

// addRoutes maps the whole API surface.
func addRoutes(r chi.Router, d Deps) {
	errs := newErrorWriter(d.RetryAfter, d.Modules, d.Operations)
	r.Use(requestContext(d.Log), recoverPanics(d.Log), observe(d.Log, d.Metrics))
	r.NotFound(handleNotFound())
	r.MethodNotAllowed(handleMethodNotAllowed())

	r.Get("/healthz", handleHealthz())
	r.Get("/readyz", handleReadyz(d.Ready))
	if !d.SeparateOps {
		r.Method("GET", "/metrics", metricsHandler(d))
	}
	r.Get("/openapi.yaml", handleOpenAPI(d.OpenAPI))
	r.Mount(apidocs.Path, apidocs.Handler())
	if d.StripeWebhooks != nil { // signed by Stripe, not authenticated by an API key
		r.Method("POST", "/webhooks/stripe", d.StripeWebhooks)
	}

	r.Group(func(r chi.Router) {
		r.Use(authenticate(apikeys.NewAuthenticator(d.DB, d.APIKeys, d.clock(), 0), newAuthThrottle(d.clock()), d.Metrics, errs), limitRate(newLimiter(d.RateLimit, d.clock())),
			rejectUnstorableIDs(errs))
		for _, op := range d.Operations {
			op.Routes(r, api{errs: errs})
		}
		for _, routes := range d.Features {
			routes(r, api{errs: errs})
		}
	})
}

// metricsHandler serves the service's metrics in Prometheus' format.
func metricsHandler(d Deps) http.Handler {
	return promhttp.HandlerFor(d.Gatherer, promhttp.HandlerOpts{})
}
