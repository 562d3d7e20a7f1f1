// Package tracing sets up OpenTelemetry tracing from the standard OTEL_*
// variables and offers the few pieces the service instruments itself with:
// the HTTP server handler, the HTTP client transport, the PostgreSQL tracer,
// and the W3C traceparent that an event keeps so that its publish and its
// deliveries continue the trace of the request that created it.
//
// With neither OTEL_EXPORTER_OTLP_ENDPOINT nor
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT set, Setup returns a no-op provider,
// and every helper here returns what it was given unwrapped: tracing that
// is off costs nothing per request. The provider is passed explicitly to
// whoever needs it; nothing here is set globally.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/exaring/otelpgx"
	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Propagator is the one format the service reads and writes trace context
// in: W3C Trace Context (traceparent, tracestate), on HTTP requests, NATS
// messages and stored events alike.
var Propagator propagation.TextMapPropagator = propagation.TraceContext{}

// HeaderTraceParent is the W3C header (and NATS header) carrying a trace
// context.
const HeaderTraceParent = "traceparent"

// Enabled reports whether the OTEL_* variables ask for traces to be
// exported: an OTLP endpoint is set, the SDK is not disabled, and the
// traces exporter is not "none".
func Enabled(getenv func(string) string) bool {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") ||
		strings.EqualFold(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")), "none") {
		return false
	}
	return strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_ENDPOINT")) != "" ||
		strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")) != ""
}

// Setup returns the tracer provider the OTEL_* variables describe, and the
// function that flushes and stops it (defer it: spans still buffered are
// sent then, even once ctx ended; a failure is logged on log). service is
// the default service.name, which OTEL_SERVICE_NAME overrides. With tracing
// off (see Enabled) it returns a no-op provider and a stop that does
// nothing.
//
// The endpoint is read through getenv, as the specification spells it (the
// traces endpoint as it is; the general one with /v1/traces appended), so
// that a program whose every input is a parameter (cmd/paymentsapi's run)
// exports where its caller says. The exporter reads the other OTEL_*
// settings (headers, timeout, compression, TLS) from the process
// environment itself, as every OpenTelemetry SDK does.
func Setup(ctx context.Context, service string, getenv func(string) string, log *slog.Logger) (trace.TracerProvider, func(), error) {
	if !Enabled(getenv) {
		return noop.NewTracerProvider(), func() {}, nil
	}
	endpoint := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
	if endpoint == "" {
		endpoint = strings.TrimRight(strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_ENDPOINT")), "/") + "/v1/traces"
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(endpoint))
	if err != nil {
		return nil, nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	// WithFromEnv after the default name: OTEL_SERVICE_NAME and
	// OTEL_RESOURCE_ATTRIBUTES win over it.
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName(service)),
		resource.WithFromEnv(), resource.WithTelemetrySDK(), resource.WithHost())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, nil, errors.Join(fmt.Errorf("tracing resource: %w", err), exp.Shutdown(ctx))
	}
	// The sampler and the batch processor's limits come from
	// OTEL_TRACES_SAMPLER and OTEL_BSP_*, read by the SDK.
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	log.Info("exporting traces over OTLP/HTTP", "endpoint", endpoint)
	return tp, func() {
		// Even after ctx ended (a signal), the buffered spans are sent,
		// within a bound: a collector that is gone must not hold up the
		// exit.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
		defer cancel()
		if err := tp.Shutdown(ctx); err != nil {
			log.Warn("could not flush the last traces", "error", err)
		}
	}, nil
}

// shutdownTimeout bounds the last flush of spans on shutdown.
const shutdownTimeout = 5 * time.Second

// Active reports whether tp records anything: false for nil and for the
// no-op provider, so that callers skip instrumentation altogether.
func Active(tp trace.TracerProvider) bool {
	if tp == nil {
		return false
	}
	_, off := tp.(noop.TracerProvider)
	return !off
}

// Tracer returns the service's tracer of tp, or nil when tp is not active.
func Tracer(tp trace.TracerProvider) trace.Tracer {
	if !Active(tp) {
		return nil
	}
	return tp.Tracer("github.com/paymentsapi/paymentsapi")
}

// Handler wraps an HTTP server handler in a server span that continues an
// incoming traceparent. The span is named by the chi route pattern that
// served the request ("POST /payments/{paymentID}/refunds"), never by the
// raw path, which would make every payment a span name of its own. With tp
// not active, h is returned as it is.
func Handler(tp trace.TracerProvider, h http.Handler) http.Handler {
	if !Active(tp) {
		return h
	}
	routes, _ := h.(chi.Routes)
	named := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// chi fills a routing context it finds in the request instead of
		// one of its own: this one outlives the routing, so that the
		// pattern it matched can name the span afterwards.
		rctx := chi.NewRouteContext()
		rctx.Routes = routes
		r = r.WithContext(context.WithValue(r.Context(), chi.RouteCtxKey, rctx))
		h.ServeHTTP(w, r)
		if p := rctx.RoutePattern(); p != "" {
			span := trace.SpanFromContext(r.Context())
			span.SetName(r.Method + " " + p)
			span.SetAttributes(semconv.HTTPRoute(p))
		}
	})
	return otelhttp.NewHandler(named, "http.server",
		otelhttp.WithTracerProvider(tp), otelhttp.WithMeterProvider(metricnoop.NewMeterProvider()),
		otelhttp.WithPropagators(Propagator),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return r.Method }),
		// Probes and scrapes, every few seconds from every orchestrator,
		// would each be a trace that says nothing.
		otelhttp.WithFilter(func(r *http.Request) bool {
			return r.URL.Path != "/healthz" && r.URL.Path != "/readyz" && r.URL.Path != "/metrics"
		}))
}

// Transport wraps an HTTP client transport (nil: http.DefaultTransport) so
// that each request is a client span and carries traceparent to the server.
// With tp not active, rt is returned as it is.
func Transport(tp trace.TracerProvider, rt http.RoundTripper) http.RoundTripper {
	if !Active(tp) {
		return rt
	}
	if rt == nil {
		rt = http.DefaultTransport
	}
	return otelhttp.NewTransport(rt,
		otelhttp.WithTracerProvider(tp), otelhttp.WithMeterProvider(metricnoop.NewMeterProvider()),
		otelhttp.WithPropagators(Propagator))
}

// Pool returns the option of database.Open that makes every round trip to
// PostgreSQL (a query, a batch and each of its statements, a prepare, a
// connect) a span under the caller's, or nil when tp is not active: the
// pool then has no tracer at all. Acquiring a pooled connection is no round
// trip and is left out; so are spans without a parent (a background loop's
// polls), which would each be a trace of their own.
func Pool(tp trace.TracerProvider) func(*pgxpool.Config) {
	if !Active(tp) {
		return nil
	}
	t := otelpgx.NewTracer(otelpgx.WithTracerProvider(tp), otelpgx.WithMeterProvider(metricnoop.NewMeterProvider()),
		otelpgx.WithDisableAcquireTracer())
	return func(cfg *pgxpool.Config) { cfg.ConnConfig.Tracer = t }
}

// TraceParent returns the W3C traceparent of the span in ctx, or "" when
// ctx carries none (tracing off, or a background loop).
func TraceParent(ctx context.Context) string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ""
	}
	c := propagation.MapCarrier{}
	Propagator.Inject(ctx, c)
	return c[HeaderTraceParent]
}

// WithTraceParent returns ctx with the remote span context that traceparent
// names, for spans to continue it; ctx as it is when traceparent is empty or
// malformed.
func WithTraceParent(ctx context.Context, traceparent string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return Propagator.Extract(ctx, propagation.MapCarrier{HeaderTraceParent: traceparent})
}
