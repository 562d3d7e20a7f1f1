package stream_test

import (
	"context"
	"errors"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/outbox"
	"github.com/paymentsapi/paymentsapi/internal/outbox/stream"
	"github.com/paymentsapi/paymentsapi/internal/tracing"
)

// An event written under a span keeps its traceparent in the outbox; each
// publish of it is a producer span of that trace, under the writer's span
// (a retry too: not under the failed attempt's), and the publisher gets the
// publish span's traceparent, for the NATS header and the event log. An
// untraced event is published untraced-in, under a root span.
func TestEachPublishContinuesTheTraceTheEventWasWrittenIn(t *testing.T) {
	t.Parallel()
	e := newEnv(t) // the relay's first RunOnce creates the slot and publishes through its catch-up
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	ctx, request := tp.Tracer("test").Start(context.Background(), "POST /payments")
	traced, err := outbox.NewEvent(ctx, "PaymentCreated", "payment", "pay_traced", map[string]string{"id": "pay_traced"}, t0)
	if err != nil {
		t.Fatal(err)
	}
	request.End()
	untraced, err := outbox.NewEvent(context.Background(), "PaymentCreated", "payment", "pay_untraced", map[string]string{"id": "pay_untraced"}, t0)
	if err != nil {
		t.Fatal(err)
	}
	e.commit(t, traced, untraced)

	b := newBroker()
	b.fail = func(ev outbox.Event, attempt int) error {
		if ev.ID == traced.ID && attempt == 1 {
			return errors.New("refused once")
		}
		return nil
	}
	r := stream.NewRelay(stream.RelayDeps{ConnString: e.url, DB: e.pool, Publisher: b, Clock: clock.System{}, Tracer: tp},
		stream.RelayConfig{Options: stream.Options{Slot: e.slot}})
	t.Cleanup(func() { r.Close(context.Background()) })
	if n, err := r.RunOnce(context.Background()); err != nil || n != 2 {
		t.Fatalf("RunOnce: %d, %v; want 2 published", n, err)
	}

	var publishes []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Name == "publish PaymentCreated" && s.SpanContext.TraceID() == request.SpanContext().TraceID() {
			publishes = append(publishes, s)
		}
	}
	if len(publishes) != 2 {
		t.Fatalf("%d publish spans in the request's trace, want 2 (a failed attempt and its retry): %v", len(publishes), exp.GetSpans())
	}
	for _, s := range publishes {
		if s.SpanKind != trace.SpanKindProducer || s.Parent.SpanID() != request.SpanContext().SpanID() {
			t.Errorf("publish span %v under %v: want a producer span under the request's", s.SpanContext, s.Parent)
		}
	}
	if publishes[0].Status.Code.String() != "Error" {
		t.Errorf("the failed attempt's span has status %v, want Error", publishes[0].Status)
	}
	for _, ev := range b.waitFor(t, 2) {
		switch ev.AggregateID {
		case "pay_traced":
			want := tracing.TraceParent(trace.ContextWithSpanContext(context.Background(), publishes[1].SpanContext))
			if ev.TraceParent != want {
				t.Errorf("published with traceparent %q, want the accepted publish span's %q", ev.TraceParent, want)
			}
		case "pay_untraced":
			if ev.TraceParent == "" || ev.TraceParent == traced.TraceParent {
				t.Errorf("the untraced event was published with traceparent %q, want its own publish span's", ev.TraceParent)
			}
		}
	}
}
