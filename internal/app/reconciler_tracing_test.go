package app_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/paymentsapi/paymentsapi/internal/app"
	"github.com/paymentsapi/paymentsapi/internal/metrics"
	"github.com/paymentsapi/paymentsapi/internal/payments"
	"github.com/paymentsapi/paymentsapi/internal/servicetest"
)

// The reconciler's work is traced too: each key it resolves is the root
// span of a trace, and the event it writes keeps that trace's context, so
// that its publish and its webhook deliveries continue it.
func TestTheReconcilersEventsAreTraced(t *testing.T) {
	t.Parallel()
	e := servicetest.New(t)
	if r := e.Post("k-lost", servicetest.Body("paymentMethod", `"pm_sim_timeout_after_success"`)); r.Status != http.StatusAccepted {
		t.Fatalf("the lost answer: %d %s", r.Status, r.Body)
	}
	id := e.OnlyPaymentID()
	e.Clock.Advance(e.Config.Lease + time.Minute)

	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	core := app.New(app.Deps{DB: e.Pool, Provider: e.Provider, Clock: e.Clock, Log: servicetest.TestLogger(),
		Metrics: metrics.New(prometheus.NewRegistry()), Tracer: tp}, e.Config)
	stats, err := core.Reconciler.RunOnce(context.Background(), 10)
	if err != nil || stats[payments.OutcomeSucceeded] != 1 {
		t.Fatalf("reconciler: %v %v", stats, err)
	}
	var root *tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Name == "reconcile "+payments.OperationCreate {
			root = &s
		}
	}
	if root == nil {
		t.Fatalf("no reconcile span among %v", exp.GetSpans())
	}
	if root.Parent.IsValid() {
		t.Errorf("the reconcile span has a parent %v: want a root", root.Parent)
	}
	var traceparent string
	if err := e.Pool.QueryRow(context.Background(), `SELECT COALESCE(traceparent, '') FROM outbox_events
		WHERE aggregate_id = $1 AND event_type = 'PaymentSucceeded'`, id).Scan(&traceparent); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(traceparent, root.SpanContext.TraceID().String()) {
		t.Errorf("PaymentSucceeded written with traceparent %q, want one of trace %s", traceparent, root.SpanContext.TraceID())
	}
}
