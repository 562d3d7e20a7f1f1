package logging

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
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
