package tracing

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-chi/chi/v5"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// With no OTEL_* variable set, tracing is off: a no-op provider, and every
// wrapper hands back what it was given, so that nothing runs per request.
func TestOffCostsNothing(t *testing.T) {
	tp, stop, err := Setup(context.Background(), "test", func(string) string { return "" }, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if Active(tp) || Tracer(tp) != nil || Pool(tp) != nil {
		t.Fatalf("tracing is on without OTEL_* variables")
	}
	h := chi.NewRouter()
	if got := Handler(tp, h); got != http.Handler(h) {
		t.Errorf("Handler wrapped the router with tracing off")
	}
	if got := Transport(tp, http.DefaultTransport); got != http.DefaultTransport {
		t.Errorf("Transport wrapped the transport with tracing off")
	}
	if TraceParent(context.Background()) != "" {
		t.Errorf("an untraced context has a traceparent")
	}
	for _, env := range []map[string]string{
		{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_SDK_DISABLED": "true"},
		{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces", "OTEL_TRACES_EXPORTER": "none"},
	} {
		if Enabled(func(k string) string { return env[k] }) {
			t.Errorf("enabled with %v", env)
		}
	}
	if !Enabled(func(k string) string {
		return map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}[k]
	}) {
		t.Errorf("not enabled with a traces endpoint")
	}
}

// The server span continues the caller's traceparent and is named by the
// route pattern, not the path; the client transport sends the traceparent
// of its own span; a traceparent kept as a string continues the trace.
func TestHandlerTransportAndTraceParent(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	var sent string
	provider := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		sent = r.Header.Get(HeaderTraceParent)
	}))
	defer provider.Close()
	client := &http.Client{Transport: Transport(tp, nil)}

	var kept string
	r := chi.NewRouter()
	r.Post("/payments/{id}/refunds", func(_ http.ResponseWriter, r *http.Request) {
		kept = TraceParent(r.Context())
		req, _ := http.NewRequestWithContext(r.Context(), http.MethodPost, provider.URL, nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Error(err)
			return
		}
		resp.Body.Close()
	})
	req := httptest.NewRequest(http.MethodPost, "/payments/pay_1/refunds", nil)
	req.Header.Set(HeaderTraceParent, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	Handler(tp, r).ServeHTTP(httptest.NewRecorder(), req)

	spans := exp.GetSpans()
	if len(spans) != 2 {
		t.Fatalf("want a client and a server span, got %d", len(spans))
	}
	client0, server := spans[0], spans[1]
	if server.Name != "POST /payments/{id}/refunds" {
		t.Errorf("server span named %q, want the route pattern", server.Name)
	}
	if server.SpanContext.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || server.Parent.SpanID().String() != "00f067aa0ba902b7" {
		t.Errorf("server span does not continue the incoming traceparent: %v under %v", server.SpanContext, server.Parent)
	}
	if client0.Parent.SpanID() != server.SpanContext.SpanID() {
		t.Errorf("the provider call is not under the server span")
	}
	if want := "00-4bf92f3577b34da6a3ce929d0e0e4736-" + client0.SpanContext.SpanID().String() + "-01"; sent != want {
		t.Errorf("provider got traceparent %q, want %q", sent, want)
	}
	if want := "00-4bf92f3577b34da6a3ce929d0e0e4736-" + server.SpanContext.SpanID().String() + "-01"; kept != want {
		t.Errorf("TraceParent = %q, want %q", kept, want)
	}
	ctx, span := tp.Tracer("t").Start(WithTraceParent(context.Background(), kept), "later")
	span.End()
	if got := exp.GetSpans()[2]; got.Parent.SpanID() != server.SpanContext.SpanID() || TraceParent(ctx) == kept {
		t.Errorf("a span started from the kept traceparent is not the server span's child")
	}

	// Probes are not traced.
	r.Get("/healthz", func(http.ResponseWriter, *http.Request) {})
	Handler(tp, r).ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/healthz", nil))
	if n := len(exp.GetSpans()); n != 3 {
		t.Errorf("GET /healthz made a span")
	}
}
