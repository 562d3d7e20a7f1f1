package outbox_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/outbox"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

type brokenWriter struct{}

func (brokenWriter) Write([]byte) (int, error) { return 0, errors.New("broken pipe") }

// TestLogPublisherWriteFailureIsAnOutage: a writer that fails fails every
// event alike: the log publisher's broker is down, not the event.
func TestLogPublisherWriteFailureIsAnOutage(t *testing.T) {
	t.Parallel()
	ev, err := outbox.NewEvent(context.Background(), "PaymentCreated", "payment", "pay_a", map[string]string{"paymentId": "pay_a"}, t0)
	if err != nil {
		t.Fatal(err)
	}
	if err := outbox.NewLogPublisher(brokenWriter{}).Publish(context.Background(), ev); !errors.Is(err, outbox.ErrBrokerUnavailable) {
		t.Fatalf("Publish to a broken writer = %v, want ErrBrokerUnavailable", err)
	}
}

func TestLogPublisherWritesJSONLines(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	p := outbox.NewLogPublisher(&buf)
	ev, err := outbox.NewEvent(context.Background(), "PaymentSucceeded", "payment", "pay_a", map[string]string{"paymentId": "pay_a"}, t0)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := p.Publish(context.Background(), ev); err != nil {
			t.Fatal(err)
		}
	}
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines: %q", len(lines), buf.String())
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &got); err != nil {
		t.Fatal(err)
	}
	if got["eventId"] != ev.ID || got["type"] != "PaymentSucceeded" || got["aggregateId"] != "pay_a" {
		t.Fatalf("line: %s", lines[0])
	}
}

// The log publisher writes a whole batch with one Write, one line per
// event, in order; a failed write fails every event as the broker's fault.
func TestLogPublisherWritesABatchAtOnce(t *testing.T) {
	t.Parallel()
	var w countingWriter
	p := outbox.NewLogPublisher(&w)
	var events []outbox.Event
	for _, id := range []string{"pay_a", "pay_b", "pay_c"} {
		ev, err := outbox.NewEvent(context.Background(), "PaymentCreated", "payment", id, map[string]string{"paymentId": id}, t0)
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, ev)
	}
	for i, err := range p.PublishBatch(context.Background(), events) {
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
	}
	lines := strings.Split(strings.TrimSuffix(w.buf.String(), "\n"), "\n")
	if w.writes != 1 || len(lines) != 3 || !strings.Contains(lines[0], `"pay_a"`) || !strings.Contains(lines[2], `"pay_c"`) {
		t.Errorf("%d writes of %q, want one write of three lines in order", w.writes, w.buf.String())
	}
	for i, err := range outbox.NewLogPublisher(brokenWriter{}).PublishBatch(context.Background(), events) {
		if !errors.Is(err, outbox.ErrBrokerUnavailable) {
			t.Errorf("event %d on a broken writer: %v, want ErrBrokerUnavailable", i, err)
		}
	}
}

type countingWriter struct {
	buf    bytes.Buffer
	writes int
}

func (w *countingWriter) Write(p []byte) (int, error) {
	w.writes++
	return w.buf.Write(p)
}

// AppendJSON writes what json.Marshal writes for an event: byte for byte
// when the payload is compact and has none of the characters json.Marshal
// escapes, and the same event when it is not (a jsonb payload as PostgreSQL
// prints it), on one line either way.
func TestAppendJSONWritesWhatMarshalWrites(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 27, 6, 30, 0, 123456789, time.FixedZone("CET", 3600))
	events := []outbox.Event{
		{ID: "0196f1a0-0000-7000-8000-000000000001", Type: "PaymentSucceeded", AggregateType: "payment", AggregateID: "pay_a",
			OccurredAt: at, Payload: json.RawMessage(`{"paymentId":"pay_a","amount":"10.00"}`)},
		{ID: `id "quoted" \ <b>&`, Type: "Tÿpe\n", AggregateType: "payment", AggregateID: "pay_\u2028",
			OccurredAt: at.UTC(), Payload: json.RawMessage(`["a",1,null]`)},
		{ID: "e3", Type: "T", AggregateType: "refund", AggregateID: "re_1", OccurredAt: t0},
	}
	for _, e := range events {
		want, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		got, err := outbox.AppendJSON(nil, e)
		if err != nil || string(got) != string(want) {
			t.Errorf("AppendJSON: %s, %v\n      want %s", got, err, want)
		}
	}
	spaced := events[0]
	spaced.Payload = json.RawMessage("{\"paymentId\": \"pay_a\",\n \"amount\": \"10.00\", \"note\": \"<&>\"}")
	got, err := outbox.AppendJSON(nil, spaced)
	if err != nil || bytes.ContainsAny(got, "\r\n") {
		t.Fatalf("AppendJSON of a payload with a line break: %q, %v", got, err)
	}
	var back outbox.Event
	if err := json.Unmarshal(got, &back); err != nil {
		t.Fatalf("%s: %v", got, err)
	}
	var gotPayload, wantPayload any
	if json.Unmarshal(back.Payload, &gotPayload) != nil || json.Unmarshal(spaced.Payload, &wantPayload) != nil ||
		fmt.Sprint(gotPayload) != fmt.Sprint(wantPayload) || back.ID != spaced.ID || !back.OccurredAt.Equal(spaced.OccurredAt) {
		t.Errorf("read back %+v (payload %s), want %+v", back, back.Payload, spaced)
	}
	broken := events[0]
	broken.Payload = json.RawMessage("{\"a\":\n")
	if _, err := outbox.AppendJSON(nil, broken); err == nil {
		t.Error("a broken payload with a line break was written")
	}
}
