// Package logging adds request-scoped fields (request id, tenant, payment
// id) to every log record written with a request's context, and the trace
// and span ids of the context's span when it is traced.
package logging

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"go.opentelemetry.io/otel/trace"
)

type fieldsKey struct{}

// fields is the mutable, request-scoped set of attributes. It is shared by
// the middleware that creates it and the handlers that add to it.
type fields struct {
	mu    sync.Mutex
	attrs []slog.Attr
}

// WithFields returns a context that carries a fresh set of request fields.
func WithFields(ctx context.Context) context.Context {
	return context.WithValue(ctx, fieldsKey{}, &fields{})
}

// Add records key=value on the request of ctx, for every later log record
// written with ctx. It does nothing if ctx has no request fields.
func Add(ctx context.Context, key string, value any) {
	f, ok := ctx.Value(fieldsKey{}).(*fields)
	if !ok {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, a := range f.attrs {
		if a.Key == key {
			f.attrs[i] = slog.Any(key, value)
			return
		}
	}
	f.attrs = append(f.attrs, slog.Any(key, value))
}

// Get returns the value of a request field, or "".
func Get(ctx context.Context, key string) string {
	f, ok := ctx.Value(fieldsKey{}).(*fields)
	if !ok {
		return ""
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, a := range f.attrs {
		if a.Key == key {
			return a.Value.String()
		}
	}
	return ""
}

// handler wraps another slog.Handler and adds the request fields of the
// record's context.
type handler struct{ slog.Handler }

func (h handler) Handle(ctx context.Context, r slog.Record) error {
	if f, ok := ctx.Value(fieldsKey{}).(*fields); ok {
		f.mu.Lock()
		attrs := f.attrs
		if r.NumAttrs() > 0 {
			// A field the call names itself (tenant, payment_id) is
			// written once, as the call gives it.
			attrs = slices.DeleteFunc(slices.Clone(attrs), func(a slog.Attr) bool { return hasAttr(r, a.Key) })
		}
		r.AddAttrs(attrs...)
		f.mu.Unlock()
	}
	// A traced request's records carry its trace: the line leads to the
	// trace, and the trace to every line of the request. Without tracing
	// the span context is invalid and nothing is added.
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

// hasAttr reports whether r has an attribute named key.
func hasAttr(r slog.Record, key string) bool {
	found := false
	r.Attrs(func(a slog.Attr) bool {
		found = a.Key == key
		return !found
	})
	return found
}

func (h handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return handler{h.Handler.WithAttrs(attrs)}
}

func (h handler) WithGroup(name string) slog.Handler { return handler{h.Handler.WithGroup(name)} }

// New returns a JSON logger on w at level ("debug", "info", "warn", "error").
func New(w io.Writer, level string) *slog.Logger {
	var lv slog.Level
	switch strings.ToLower(level) {
	case "debug":
		lv = slog.LevelDebug
	case "warn":
		lv = slog.LevelWarn
	case "error":
		lv = slog.LevelError
	default:
		lv = slog.LevelInfo
	}
	return slog.New(handler{slog.NewJSONHandler(w, &slog.HandlerOptions{Level: lv, ReplaceAttr: readableDurations})})
}

// readableDurations writes a duration as Go spells it ("1.5s"), not as
// the nanoseconds JSON would otherwise show. It also hands the record's
// level back as the string slog writes for it ("INFO"): with a ReplaceAttr,
// slog passes the level in as a value of any kind, which its JSON handler
// would then encode through encoding/json's reflection on every line.
func readableDurations(groups []string, a slog.Attr) slog.Attr {
	switch {
	case a.Value.Kind() == slog.KindDuration:
		return slog.String(a.Key, a.Value.Duration().String())
	case a.Key == slog.LevelKey && len(groups) == 0:
		if l, ok := a.Value.Any().(slog.Level); ok {
			return slog.String(a.Key, l.String())
		}
	}
	return a
}
