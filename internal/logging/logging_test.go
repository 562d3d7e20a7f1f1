package logging

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
)

func TestRequestFieldsAppearOnEveryRecord(t *testing.T) {
	var buf bytes.Buffer
	log := New(&buf, "info")
	ctx := WithFields(context.Background())
	Add(ctx, "request_id", "req-1")
	Add(ctx, "tenant", "demo")
	Add(ctx, "tenant", "acme") // replaces, never duplicates
	log.InfoContext(ctx, "hello", "payment_id", "pay_1")
	log.DebugContext(ctx, "hidden at info level")

	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("want exactly one JSON record, got %q: %v", buf.String(), err)
	}
	for k, want := range map[string]string{"request_id": "req-1", "tenant": "acme", "payment_id": "pay_1"} {
		if rec[k] != want {
			t.Errorf("%s = %v, want %s (record %v)", k, rec[k], want, rec)
		}
	}
	if Get(ctx, "tenant") != "acme" || Get(context.Background(), "tenant") != "" {
		t.Errorf("Get returned the wrong value")
	}
}

// A field the call names itself is written once, as the call gives it; a
// duration reads as Go spells it, not in nanoseconds.
func TestNoRepeatedFieldsAndReadableDurations(t *testing.T) {
	var buf bytes.Buffer
	log := New(&buf, "info")
	ctx := WithFields(context.Background())
	Add(ctx, "tenant", "demo")
	log.InfoContext(ctx, "hello", "tenant", "demo", "wait", 1500*time.Millisecond)
	if n := bytes.Count(buf.Bytes(), []byte(`"tenant"`)); n != 1 {
		t.Errorf("tenant written %d times: %s", n, buf.Bytes())
	}
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatal(err)
	}
	if rec["wait"] != "1.5s" {
		t.Errorf("wait = %v, want 1.5s", rec["wait"])
	}
}

// A record written with a traced context carries the trace and span ids; one
// without a span carries neither.
func TestTraceIDOnTracedRecords(t *testing.T) {
	var buf bytes.Buffer
	log := New(&buf, "info")
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ctx := trace.ContextWithSpanContext(WithFields(context.Background()),
		trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}))
	log.InfoContext(ctx, "traced")
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatal(err)
	}
	if rec["trace_id"] != tid.String() || rec["span_id"] != sid.String() {
		t.Errorf("record %v: want trace_id %s and span_id %s", rec, tid, sid)
	}
	buf.Reset()
	log.InfoContext(context.Background(), "untraced")
	if bytes.Contains(buf.Bytes(), []byte("trace_id")) {
		t.Errorf("untraced record has a trace_id: %s", buf.Bytes())
	}
}

// Each level reads as slog writes it without a ReplaceAttr ("INFO",
// "WARN+2"), and an attribute that happens to be called "level" inside a
// group is left as it is.
func TestLevelsReadAsSlogWritesThem(t *testing.T) {
	for _, lv := range []slog.Level{slog.LevelDebug, slog.LevelInfo, slog.LevelWarn, slog.LevelError, slog.LevelWarn + 2} {
		var buf, plain bytes.Buffer
		slog.New(handler{slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug, ReplaceAttr: readableDurations})}).
			Log(context.Background(), lv, "m", slog.Group("g", "level", 3))
		slog.New(slog.NewJSONHandler(&plain, &slog.HandlerOptions{Level: slog.LevelDebug})).
			Log(context.Background(), lv, "m", slog.Group("g", "level", 3))
		strip := func(b []byte) string { // the time differs
			var rec map[string]any
			if err := json.Unmarshal(b, &rec); err != nil {
				t.Fatal(err)
			}
			delete(rec, "time")
			out, _ := json.Marshal(rec)
			return string(out)
		}
		if got, want := strip(buf.Bytes()), strip(plain.Bytes()); got != want {
			t.Errorf("level %v: %s, want %s", lv, got, want)
		}
	}
}
