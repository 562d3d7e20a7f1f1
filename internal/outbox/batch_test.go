package outbox_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/outbox"
)

// batcher is a BatchPublisher that records its calls; fail decides each
// event's result in a batch (nil: accepted).
type batcher struct {
	mu      sync.Mutex
	batches [][]string // aggregate:type of each event, per PublishBatch call
	singles int        // Publish calls
	fail    func(e outbox.Event) error
}

func (b *batcher) Publish(_ context.Context, e outbox.Event) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.singles++
	if b.fail != nil {
		return b.fail(e)
	}
	return nil
}

func (b *batcher) PublishBatch(_ context.Context, events []outbox.Event) []error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.batches = append(b.batches, ids(events))
	errs := make([]error, len(events))
	for i, e := range events {
		if b.fail != nil {
			errs[i] = b.fail(e)
		}
	}
	return errs
}

// A pass hands all its rows to a BatchPublisher in one call, in seq order,
// and marks each one it accepted; the per-payment order still holds (a
// payment's next event goes out in a later pass).
func TestPassPublishesItsRowsInOneBatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	events := e.add("pay_a:PaymentCreated", "pay_b:PaymentCreated", "pay_c:PaymentCreated", "pay_a:PaymentSucceeded")
	b := &batcher{}
	r := e.relay(b, outbox.RelayConfig{})
	mustRunOnce(t, r, 3)
	mustRunOnce(t, r, 1)
	mustRunOnce(t, r, 0)
	if got := fmt.Sprint(b.batches); got != "[[pay_a:PaymentCreated pay_b:PaymentCreated pay_c:PaymentCreated]]" || b.singles != 1 {
		t.Errorf("batches %s and %d single publishes, want the first pass's three rows in one batch, then the last row alone", got, b.singles)
	}
	for _, ev := range events {
		if row := e.row(ev.ID); !row.published || row.attempts != 1 {
			t.Errorf("event %s: %+v", ev.ID, row)
		}
	}
}

// Every event of a batch was sent, so each result is booked on its own row,
// whatever the others': an event that failed through its own fault backs
// off (its attempt counted), one the broker could not take goes back
// uncounted, an accepted one is marked even after an outage earlier in the
// batch, and the outage pauses the relay.
func TestEachResultOfABatchIsBookedOnItsRow(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	events := e.add("pay_a:PaymentCreated", "pay_b:PaymentCreated", "pay_c:PaymentCreated", "pay_d:PaymentCreated")
	b := &batcher{fail: func(ev outbox.Event) error {
		switch ev.AggregateID {
		case "pay_b":
			return errors.New("rejected: too large")
		case "pay_c":
			return fmt.Errorf("%w: no stream", outbox.ErrBrokerUnavailable)
		}
		return nil
	}}
	r := e.relay(b, outbox.RelayConfig{})
	n, err := r.RunOnce(context.Background())
	if !errors.Is(err, outbox.ErrBrokerUnavailable) || n != 2 {
		t.Fatalf("RunOnce = %d, %v; want 2 published and the outage", n, err)
	}
	if len(b.batches) != 1 || b.singles != 0 {
		t.Fatalf("batches %v and %d single publishes, want one batch", b.batches, b.singles)
	}
	a, bRow, c, d := e.row(events[0].ID), e.row(events[1].ID), e.row(events[2].ID), e.row(events[3].ID)
	if !a.published || a.attempts != 1 || !d.published || d.attempts != 1 {
		t.Errorf("accepted events: %+v %+v, want published", a, d)
	}
	if bRow.published || bRow.attempts != 1 || !strings.Contains(bRow.lastError, "too large") || !bRow.nextAttemptAt.After(t0) {
		t.Errorf("failed event: %+v, want one attempt, backing off", bRow)
	}
	if c.published || c.claimed || c.attempts != 0 {
		t.Errorf("event the broker could not take: %+v, want handed back uncounted", c)
	}
	if _, err := r.RunOnce(context.Background()); !errors.Is(err, outbox.ErrBrokerUnavailable) {
		t.Errorf("the pass after the outage: %v, want the relay pausing", err)
	}
}

// wrongCount is a BatchPublisher with a defect: one result for any batch.
type wrongCount struct{ batcher }

func (w *wrongCount) PublishBatch(ctx context.Context, events []outbox.Event) []error {
	return w.batcher.PublishBatch(ctx, events)[:1]
}

// A publisher that answers a batch with the wrong number of results says
// nothing about which events it took: the relay hands them all back
// uncounted and pauses as for an outage, rather than sending the batch
// again on every pass.
func TestABatchAnsweredWithTheWrongCountIsAnOutage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	events := e.add("pay_a:PaymentCreated", "pay_b:PaymentCreated")
	w := &wrongCount{}
	r := e.relay(w, outbox.RelayConfig{})
	if n, err := r.RunOnce(context.Background()); !errors.Is(err, outbox.ErrBrokerUnavailable) || n != 0 {
		t.Fatalf("RunOnce = %d, %v; want nothing published and an outage", n, err)
	}
	for _, ev := range events {
		if row := e.row(ev.ID); row.published || row.claimed || row.attempts != 0 {
			t.Errorf("event %s: %+v, want handed back uncounted", ev.AggregateID, row)
		}
	}
	if _, err := r.RunOnce(context.Background()); !errors.Is(err, outbox.ErrBrokerUnavailable) || len(w.batches) != 1 {
		t.Errorf("the next pass: %v after %d batches, want the relay pausing, not sending again", err, len(w.batches))
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
