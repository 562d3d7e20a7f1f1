package outbox_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/paymentsapi/paymentsapi/internal/outbox"
	"github.com/paymentsapi/paymentsapi/internal/tracing"
)

// An event written under a span keeps its traceparent in the outbox; the
// relay's publish is a span of that trace, under the writer's span, and the
// publisher gets the publish span's traceparent (for the NATS header and
// the event log). An untraced event stays untraced in the row.
func TestPublishContinuesTheTraceTheEventWasWrittenIn(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	ctx, request := tp.Tracer("test").Start(context.Background(), "POST /payments")
	traced, err := outbox.NewEvent(ctx, "PaymentCreated", "payment", "pay_traced", map[string]string{"id": "pay_traced"}, t0)
	if err != nil {
		t.Fatal(err)
	}
	request.End()
	if traced.TraceParent != tracing.TraceParent(ctx) {
		t.Fatalf("event built under a span has traceparent %q, want the span's %q", traced.TraceParent, tracing.TraceParent(ctx))
	}
	untraced, err := outbox.NewEvent(context.Background(), "PaymentCreated", "payment", "pay_untraced", map[string]string{"id": "pay_untraced"}, t0)
	if err != nil {
		t.Fatal(err)
	}
	if untraced.TraceParent != "" {
		t.Fatal("an untraced context gave a traceparent")
	}
	b := &pgx.Batch{}
	outbox.Queue(b, traced)
	outbox.Queue(b, untraced)
	if err := e.pool.SendBatch(context.Background(), b).Close(); err != nil {
		t.Fatal(err)
	}
	if n := e.count(`traceparent IS NULL`); n != 1 {
		t.Fatalf("%d rows without a traceparent, want the untraced one", n)
	}

	rec := &recorder{}
	r, err := outbox.NewRelay(outbox.RelayDeps{DB: e.pool, Publisher: rec.publisher("r"), Clock: e.clock, Tracer: tp}, outbox.RelayConfig{})
	if err != nil {
		t.Fatal(err)
	}
	mustRunOnce(t, r, 2)

	var publish *tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Name == "publish PaymentCreated" && s.SpanContext.TraceID() == request.SpanContext().TraceID() {
			publish = &s
		}
	}
	if publish == nil {
		t.Fatalf("no publish span in the request's trace among %v", exp.GetSpans())
	}
	if publish.SpanKind != trace.SpanKindProducer || publish.Parent.SpanID() != request.SpanContext().SpanID() {
		t.Errorf("publish span %v under %v: want a producer span under the request's", publish.SpanContext, publish.Parent)
	}
	for _, ev := range rec.published() {
		if ev.AggregateID != "pay_traced" {
			continue
		}
		want := tracing.TraceParent(trace.ContextWithSpanContext(context.Background(), publish.SpanContext))
		if ev.TraceParent != want {
			t.Errorf("published with traceparent %q, want the publish span's %q", ev.TraceParent, want)
		}
	}
}
