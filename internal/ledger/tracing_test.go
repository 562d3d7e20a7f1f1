package ledger_test

import (
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/paymentsapi/paymentsapi/internal/ledger"
	"github.com/paymentsapi/paymentsapi/internal/outbox/natspub"
)

// The traceparent a message carries as a NATS header (the relay's publish
// span) is continued by the ledger's handling of it.
func TestConsumerContinuesTheMessagesTrace(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	proj := ledger.NewProjector(ledger.Deps{DB: e.pool, Clock: e.clock, Modules: modules, Tracer: tp}, "")
	b := newBroker(t, natspub.StreamConfig{})
	const (
		traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
		publish = "00f067aa0ba902b7"
	)
	ev := succeeded(t, "pay_traced", "3.00", t0)
	ev.TraceParent = "00-" + traceID + "-" + publish + "-01"
	msg, err := natspub.Message(b.stream.SubjectPrefix, ev)
	if err != nil {
		t.Fatal(err)
	}
	if got := msg.Header.Get("traceparent"); got != ev.TraceParent {
		t.Fatalf("message header traceparent = %q, want %q", got, ev.TraceParent)
	}
	if err := natspub.NewPublisher(b.js, b.stream, nil).Publish(t.Context(), ev); err != nil {
		t.Fatal(err)
	}
	b.consume(proj)
	b.waitIdle()
	deadline := time.Now().Add(5 * time.Second)
	for len(exp.GetSpans()) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	spans := exp.GetSpans()
	if len(spans) != 1 {
		t.Fatalf("want one span of the handling, got %d", len(spans))
	}
	s := spans[0]
	if s.SpanKind != trace.SpanKindConsumer || s.SpanContext.TraceID().String() != traceID || s.Parent.SpanID().String() != publish {
		t.Errorf("span %s %v under %v: want a consumer span under the message's traceparent", s.Name, s.SpanContext, s.Parent)
	}
}
