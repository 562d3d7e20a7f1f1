package delivery_test

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/paymentsapi/paymentsapi/internal/delivery"
	"github.com/paymentsapi/paymentsapi/internal/outbox"
)

// A traced send continues the trace the event was published under (kept in
// the event log), and the merchant gets the send span's traceparent.
func TestSendContinuesTheEventsTrace(t *testing.T) {
	t.Parallel()
	e := newEnv(t, devPolicy, nil)
	e.hook(tenantA, "/traced")
	var (
		mu   sync.Mutex
		sent string
	)
	e.recv.answer("/traced", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		sent = r.Header.Get("traceparent")
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	const (
		traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
		publish = "00f067aa0ba902b7"
	)
	ev := e.draft("tenant_a", succeeded)
	ev.TraceParent = "00-" + traceID + "-" + publish + "-01"
	e.write(ev)
	if err := e.core.EventLog.FanOut(context.Background(), []outbox.Event{ev}); err != nil {
		t.Fatal(err)
	}

	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	w, err := delivery.NewWorker(delivery.Deps{DB: e.pool, Clock: e.clk, Log: slog.New(slog.DiscardHandler), Tracer: tp, Secrets: e.secrets,
		Events: e.core.EventLog.Relation()},
		delivery.Config{Policy: e.policy, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if n := e.runOnce(w); n != 1 {
		t.Fatalf("claimed %d, want 1", n)
	}
	var send *tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Name == "webhook send payment.succeeded" {
			send = &s
		}
	}
	if send == nil {
		t.Fatalf("no send span among %v", exp.GetSpans())
	}
	if send.SpanKind != trace.SpanKindClient || send.SpanContext.TraceID().String() != traceID || send.Parent.SpanID().String() != publish {
		t.Errorf("send span %v under %v: want it under the event's traceparent", send.SpanContext, send.Parent)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := "00-" + traceID + "-" + send.SpanContext.SpanID().String() + "-01"; sent != want {
		t.Errorf("merchant got traceparent %q, want %q", sent, want)
	}
}
