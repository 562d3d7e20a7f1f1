package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/paymentsapi/paymentsapi/internal/config"
	"github.com/paymentsapi/paymentsapi/internal/logging"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
	"github.com/paymentsapi/paymentsapi/internal/proctest"
)

// The trace a client starts (its traceparent) and the span it calls from.
const (
	clientTraceID    = "4bf92f3577b34da6a3ce929d0e0e4736"
	clientSpanID     = "00f067aa0ba902b7"
	clientTraceparen = "00-" + clientTraceID + "-" + clientSpanID + "-01"
)

// postTracedPayment creates a payment at base under the client's trace.
func postTracedPayment(t *testing.T, base, key string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+"/payments", strings.NewReader(
		`{"accountId":"acc_1","amount":"10.00","currency":"EUR","merchantReference":"`+key+`","paymentMethod":"pm_card_visa"}`))
	req.Header.Set("Authorization", "Bearer sk_test_demo")
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", clientTraceparen)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST /payments: %d %s", resp.StatusCode, body)
	}
}

// One POST /payments is one trace, continuing the client's traceparent: the
// server span, named by its route, parents a span per database round trip
// (batches included) and the provider call; the relay's publish of the
// payment's events continues the same trace; and the request's log line
// carries the trace id.
func TestTracingOfOnePayment(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() { _ = tp.Shutdown(context.Background()) }()

	env := map[string]string{"DATABASE_URL": pgtest.NewURL(t), "API_KEYS": config.DevAPIKeys, "PROVIDER": "sim", "PROVIDER_SIM_IN_PROCESS": "true"}
	cfg, err := config.Load([]string{"-http-addr", "127.0.0.1:0"}, getenv(env), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	stdout, stderr := proctest.NewLineWatcher(), proctest.NewLineWatcher()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- serve(ctx, cfg, logging.New(stderr, "info"), stdout, tp) }()
	base, _ := stdout.Await(t, proctest.ListeningRE, 60*time.Second)

	postTracedPayment(t, base, "traced-1")

	// The relay publishes the events within its interval.
	var spans tracetest.SpanStubs
	deadline := time.Now().Add(15 * time.Second)
	for {
		spans = exp.GetSpans()
		if publishes := named(spans, "publish PaymentSucceeded"); len(publishes) > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}

	t.Logf("spans: %s", names(spans))
	servers := named(spans, "POST /payments")
	if len(servers) != 1 {
		t.Fatalf("want one server span named by its route, got %d among %s", len(servers), names(spans))
	}
	server := servers[0]
	if server.SpanKind != trace.SpanKindServer || server.SpanContext.TraceID().String() != clientTraceID ||
		server.Parent.SpanID().String() != clientSpanID || !server.Parent.IsRemote() {
		t.Fatalf("server span %s (trace %s, parent %s): want a server span under the client's traceparent",
			server.Name, server.SpanContext.TraceID(), server.Parent.SpanID())
	}
	byID := map[trace.SpanID]tracetest.SpanStub{}
	for _, s := range spans {
		byID[s.SpanContext.SpanID()] = s
	}
	under := func(s tracetest.SpanStub) bool {
		for p := s.Parent.SpanID(); p.IsValid(); p = byID[p].Parent.SpanID() {
			if p == server.SpanContext.SpanID() {
				return true
			}
			if _, ok := byID[p]; !ok {
				return false
			}
		}
		return false
	}
	var db, batches, provider int
	for _, s := range spans {
		if s.SpanContext.TraceID() != server.SpanContext.TraceID() || !under(s) {
			continue
		}
		switch {
		case hasAttr(s, "db.system.name", "postgresql"):
			db++
			if strings.HasPrefix(s.Name, "batch") {
				batches++
			}
		case s.SpanKind == trace.SpanKindClient && hasAttr(s, "http.request.method", "POST"):
			provider++
		}
	}
	if db == 0 || batches == 0 || provider == 0 {
		t.Errorf("under the server span: %d database spans (%d of batches), %d provider calls; want each; spans: %s",
			db, batches, provider, names(spans))
	}

	publishes := named(spans, "publish PaymentSucceeded")
	if len(publishes) == 0 {
		t.Fatalf("no publish span of PaymentSucceeded; spans: %s", names(spans))
	}
	if p := publishes[0]; p.SpanContext.TraceID() != server.SpanContext.TraceID() || !under(p) {
		t.Errorf("publish span in trace %s under %s: want the request's trace, under its server span",
			p.SpanContext.TraceID(), p.Parent.SpanID())
	}

	if !strings.Contains(stderrText(stderr), `"trace_id":"`+clientTraceID+`"`) {
		t.Errorf("no log line carries trace_id %s:\n%s", clientTraceID, stderrText(stderr))
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve: %v", err)
	}
}

// With OTEL_EXPORTER_OTLP_ENDPOINT set, run exports the request's trace to
// an OTLP/HTTP receiver: the server span, database spans and the provider
// call arrive, in the client's trace, by the time run returns.
func TestTracesExportedOverOTLP(t *testing.T) {
	rcv := &otlpReceiver{}
	collector := httptest.NewServer(rcv)
	defer collector.Close()

	env := map[string]string{
		"DATABASE_URL": pgtest.NewURL(t), "API_KEYS": config.DevAPIKeys, "PROVIDER": "sim", "PROVIDER_SIM_IN_PROCESS": "true",
		"OTEL_EXPORTER_OTLP_ENDPOINT": collector.URL,
	}
	stdout, stderr := proctest.NewLineWatcher(), proctest.NewLineWatcher()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-http-addr", "127.0.0.1:0"}, getenv(env), nil, stdout, stderr)
	}()
	base, _ := stdout.Await(t, proctest.ListeningRE, 60*time.Second)
	postTracedPayment(t, base, "exported-1")
	cancel() // shutting down flushes the spans
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}

	spans := rcv.spans(clientTraceID)
	t.Logf("received: %v", spans)
	var server, db, provider bool
	for name, kind := range spans {
		switch {
		case name == "POST /payments" && kind == "SPAN_KIND_SERVER":
			server = true
		case kind == "SPAN_KIND_CLIENT" && strings.HasPrefix(name, "HTTP "):
			provider = true
		case kind == "SPAN_KIND_CLIENT":
			db = true
		}
	}
	if !server || !db || !provider {
		t.Fatalf("spans of trace %s received: %v; want the server span, database spans and the provider call", clientTraceID, spans)
	}
	if rcv.path() != "/v1/traces" {
		t.Errorf("exported to %s, want /v1/traces", rcv.path())
	}
}

// otlpReceiver is an OTLP/HTTP trace receiver: it accepts POST /v1/traces
// (protobuf, gzip or not) and keeps the spans.
type otlpReceiver struct {
	mu    sync.Mutex
	reqs  []*coltracepb.ExportTraceServiceRequest
	paths []string
}

func (o *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		gz, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = gz
	}
	raw, err := io.ReadAll(body)
	req := &coltracepb.ExportTraceServiceRequest{}
	if err == nil {
		err = proto.Unmarshal(raw, req)
	}
	if r.Method != http.MethodPost || err != nil {
		http.Error(w, "want a POST of an ExportTraceServiceRequest", http.StatusBadRequest)
		return
	}
	o.mu.Lock()
	o.reqs, o.paths = append(o.reqs, req), append(o.paths, r.URL.Path)
	o.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// spans returns the name and kind of every span of the trace received.
func (o *otlpReceiver) spans(traceID string) map[string]string {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[string]string{}
	for _, req := range o.reqs {
		for _, rs := range req.GetResourceSpans() {
			for _, ss := range rs.GetScopeSpans() {
				for _, s := range ss.GetSpans() {
					if trace.TraceID(s.GetTraceId()).String() == traceID {
						out[s.GetName()] = s.GetKind().String()
					}
				}
			}
		}
	}
	return out
}

func (o *otlpReceiver) path() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.paths) == 0 {
		return ""
	}
	return o.paths[0]
}

func named(spans tracetest.SpanStubs, name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

func names(spans tracetest.SpanStubs) string {
	var b bytes.Buffer
	for _, s := range spans {
		b.WriteString(s.Name + " (" + s.SpanKind.String() + "); ")
	}
	return b.String()
}

func hasAttr(s tracetest.SpanStub, key, value string) bool {
	for _, a := range s.Attributes {
		if string(a.Key) == key && a.Value.String() == value {
			return true
		}
	}
	return false
}

// stderrText is what was logged so far, one JSON record a line.
func stderrText(w *proctest.LineWatcher) string {
	var lines []string
	for {
		select {
		case l := <-w.Lines():
			if json.Valid([]byte(l)) {
				lines = append(lines, l)
			}
		default:
			return strings.Join(lines, "\n")
		}
	}
}
