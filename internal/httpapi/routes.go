package httpapi

import (
	"github.com/go-chi/chi/v5"
	"github.com/paymentsapi/paymentsapi/internal/apikeys"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/paymentsapi/paymentsapi/internal/apidocs"
)

// addRoutes maps the whole API surface.
func addRoutes(r chi.Router, d Deps) {
	errs := errorWriter{retryAfter: d.RetryAfter}
	r.Use(requestContext(d.Log), recoverPanics(d.Log), observe(d.Log, d.Metrics))
	r.NotFound(handleNotFound())
	r.MethodNotAllowed(handleMethodNotAllowed())

	r.Get("/healthz", handleHealthz())
	r.Get("/readyz", handleReadyz(d.Ready))
	r.Method("GET", "/metrics", promhttp.HandlerFor(d.Gatherer, promhttp.HandlerOpts{}))
	r.Get("/openapi.yaml", handleOpenAPI(d.OpenAPI))
	r.Mount(apidocs.Path, apidocs.Handler())
	if d.StripeWebhooks != nil { // signed by Stripe, not authenticated by an API key
		r.Method("POST", "/webhooks/stripe", d.StripeWebhooks)
	}

	r.Group(func(r chi.Router) {
		r.Use(authenticate(apikeys.NewAuthenticator(d.DB, d.clock(), d.APIKeyCacheTTL), errs), limitRate(newLimiter(d.RateLimit, d.clock())),
			rejectUnstorableIDs(errs))
		r.Post("/payments", handleCreatePayment(d.Payments, errs))
		r.Get("/payments", handleListPayments(d.Payments, errs))
		r.Get("/payments/{paymentId}", handleGetPayment(d.Payments, errs))
		r.Post("/payments/{paymentId}/refunds", handleCreateRefund(d.Refunds, errs))
		r.Get("/payments/{paymentId}/refunds", handleListRefunds(d.Refunds, errs))
		r.Get("/payments/{paymentId}/refunds/{refundId}", handleGetRefund(d.Refunds, errs))
	})
}
