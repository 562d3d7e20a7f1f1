// Package metrics holds the service's Prometheus collectors. Labels are
// bounded sets (route pattern, outcome), never a key or a payment id.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics are the collectors the service updates.
type Metrics struct {
	// IdempotencyClaims counts keys claimed by a first request.
	IdempotencyClaims prometheus.Counter
	// IdempotencyReplays counts stored answers replayed.
	IdempotencyReplays prometheus.Counter
	// IdempotencyConflicts counts retries refused, by reason:
	// in_flight, mismatch, expired.
	IdempotencyConflicts *prometheus.CounterVec
	// IdempotencyWaits counts the waits of duplicates sent with Prefer: wait,
	// by how they ended: notified (the original's key changed, on any
	// instance), lease_expired, or timeout.
	IdempotencyWaits *prometheus.CounterVec
	// IdempotencyTakeovers counts keys taken over from an owner whose lease
	// had run out (or that had released it without a final answer): by a
	// retry, the reconciler or ResolveNow, each once.
	IdempotencyTakeovers prometheus.Counter
	// ProviderCalls measures provider calls by operation (charge, lookup)
	// and outcome (succeeded, declined, not_found, unavailable, unknown).
	ProviderCalls *prometheus.HistogramVec
	// ReconcilerOutcomes counts the reconciler's attempts by outcome:
	// succeeded, declined, failed_retryable, unresolved, manual_review, error.
	ReconcilerOutcomes *prometheus.CounterVec
	// OperationResults counts the keys that reached their final answer,
	// by operation and outcome (create_refund succeeded, create_payment
	// declined, ...): each key once, whoever finished it (its request, a
	// retry, the reconciler).
	OperationResults *prometheus.CounterVec
	// StripeWebhooks counts Stripe's webhook events by outcome (applied,
	// duplicate, ignored, signature_invalid, ...).
	StripeWebhooks *prometheus.CounterVec
	// GroupCommitBatches measures how many requests' batches each
	// transaction of the group commit held, by kind (claims, steps): its
	// count is the transactions, its sum the batches (package groupcommit).
	GroupCommitBatches *prometheus.HistogramVec
	// GroupCommitMerged counts the requests' batches the group commit sent
	// merged with like ones (each statement once over all their rows), by
	// kind (package groupcommit, Options.Merge).
	GroupCommitMerged *prometheus.CounterVec
	// HTTPRequests measures requests by route pattern, method and status.
	HTTPRequests *prometheus.HistogramVec
	// AuthFailures counts requests refused for a missing or unknown API
	// key.
	AuthFailures prometheus.Counter
	// OrphanProviderObjects is how many of the provider's charges and
	// refunds made with this service's keys no local row explained at the
	// last audit (package orphans): a database failover lost their
	// commits, and the clients' retries have not recreated them yet.
	OrphanProviderObjects prometheus.Gauge
}

// New creates the collectors and registers them, with the Go and process
// collectors, on reg.
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		IdempotencyClaims: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "paymentsapi_idempotency_claims_total",
			Help: "Idempotency keys claimed by a first request.",
		}),
		IdempotencyReplays: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "paymentsapi_idempotency_replays_total",
			Help: "Stored responses replayed to retries.",
		}),
		IdempotencyConflicts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "paymentsapi_idempotency_conflicts_total",
			Help: "Retries refused, by reason: in_flight (409), mismatch (422), expired (409).",
		}, []string{"reason"}),
		IdempotencyWaits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "paymentsapi_idempotency_waits_total",
			Help: "Waits of duplicates sent with Prefer: wait, by how they ended: notified, lease_expired, timeout.",
		}, []string{"result"}),
		IdempotencyTakeovers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "paymentsapi_idempotency_takeovers_total",
			Help: "Keys taken over from an owner that no longer held a live lease.",
		}),
		ProviderCalls: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "paymentsapi_provider_call_duration_seconds",
			Help:    "Payment provider calls by operation and outcome.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"operation", "outcome"}),
		ReconcilerOutcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "paymentsapi_reconciler_outcomes_total",
			Help: "Reconciler attempts by outcome: succeeded, declined, failed_retryable, unresolved, manual_review, error.",
		}, []string{"outcome"}),
		OperationResults: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "paymentsapi_operation_results_total",
			Help: "Keys that reached their final answer, by operation and outcome (each key once).",
		}, []string{"operation", "outcome"}),
		StripeWebhooks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "paymentsapi_stripe_webhook_events_total",
			Help: "Stripe webhook events received, by outcome.",
		}, []string{"outcome"}),
		GroupCommitBatches: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "paymentsapi_group_commit_batches",
			Help:    "Requests' batches per transaction sent by the group commit, by kind: claims, steps.",
			Buckets: []float64{1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64},
		}, []string{"kind"}),
		GroupCommitMerged: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "paymentsapi_group_commit_merged_batches_total",
			Help: "Requests' batches the group commit sent merged with like ones, each statement once for all, by kind: claims, steps.",
		}, []string{"kind"}),
		HTTPRequests: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "paymentsapi_http_request_duration_seconds",
			Help:    "HTTP requests by route pattern, method and status code.",
			Buckets: prometheus.DefBuckets,
		}, []string{"route", "method", "status"}),
		AuthFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "paymentsapi_auth_failures_total",
			Help: "Requests refused for a missing or unknown API key.",
		}),
		OrphanProviderObjects: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "paymentsapi_orphan_provider_objects",
			Help: "The provider's charges and refunds made with this service's keys that no local row explained at the last audit.",
		}),
	}
	for _, reason := range []string{"in_flight", "mismatch", "expired"} {
		m.IdempotencyConflicts.WithLabelValues(reason) // export zeroes from the start
	}
	reg.MustRegister(m.IdempotencyClaims, m.IdempotencyReplays, m.IdempotencyConflicts, m.IdempotencyWaits,
		m.IdempotencyTakeovers, m.ProviderCalls, m.ReconcilerOutcomes, m.OperationResults, m.StripeWebhooks, m.GroupCommitBatches, m.GroupCommitMerged, m.HTTPRequests,
		m.OrphanProviderObjects, m.AuthFailures,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}
