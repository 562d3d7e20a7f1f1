package httpapi

import (
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/paymentsapi/paymentsapi/internal/apikeys"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/paymentsapi/paymentsapi/internal/actor"
	"github.com/paymentsapi/paymentsapi/internal/apidocs"
	"github.com/paymentsapi/paymentsapi/internal/operation"
)

// addRoutes maps the whole API surface.
func addRoutes(r chi.Router, d Deps) {
	errs := newErrorWriter(d.RetryAfter, d.Modules, d.Operations)
	r.Use(requestContext(d.Log, clientAddresses{trusted: d.TrustedProxies}), recoverPanics(d.Log), observe(d.Log, d.Metrics))
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
		r.Method("POST", "/webhooks/stripe", actingAs(actor.ProviderWebhook, d.StripeWebhooks))
	}
	for _, op := range d.Operations { // customers' browsers: no API key
		if public, ok := op.(operation.PublicRouter); ok {
			public.PublicRoutes(r)
		}
	}

	keys, throttle := apikeys.NewAuthenticator(d.DB, d.APIKeys, d.clock(), 0), newAuthThrottle(d.clock())
	if d.Dashboard != nil { // its own sessions, over the same authentication and throttle
		addrs := clientAddresses{trusted: d.TrustedProxies}
		r.Mount(DashboardPath, d.Dashboard(Gate{keys: keys, operators: d.Operators, throttle: throttle, metrics: d.Metrics, addrs: addrs}))
	}
	r.Group(func(r chi.Router) { // operators only, across tenants
		r.Use(authenticateOperator(d.Operators, keys, throttle, d.Metrics, errs), refuseUnknownParameters(errs))
		r.Method(http.MethodGet, "/audit-events", handleAuditEvents(d.DB, api{errs: errs}))
	})
	r.Group(func(r chi.Router) {
		r.Use(authenticate(keys, throttle, d.Metrics, errs), limitRate(newLimiter(d.RateLimit, d.clock())),
			rejectUnstorableIDs(errs), refuseUnknownParameters(errs))
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

// actingAs runs next as the actor a (package actor): what it moves names a.
func actingAs(a string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r.WithContext(actor.WithActor(r.Context(), a)))
	})
}
