package natspub_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/paymentsapi/paymentsapi/internal/outbox"
	"github.com/paymentsapi/paymentsapi/internal/outbox/natspub"
	"github.com/paymentsapi/paymentsapi/internal/outbox/natspub/natstest"
)

func testEvent(t *testing.T, typ, paymentID string, at time.Time) outbox.Event {
	t.Helper()
	e, err := outbox.NewEvent(context.Background(), typ, "payment", paymentID, map[string]string{"paymentId": paymentID, "status": "SUCCEEDED"}, at)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// defaultStream returns the publisher's default stream and its current
// state.
func defaultStream(t *testing.T, js jetstream.JetStream) (jetstream.Stream, *jetstream.StreamInfo) {
	t.Helper()
	stream, err := js.Stream(t.Context(), natspub.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return stream, info
}

// TestPublishThroughBrokerDropsDuplicateIDs publishes through a real NATS
// server: every event lands once on its subject with its id as the message
// id, and a repeat within the stream's duplicate window is acknowledged as
// a duplicate and not stored.
func TestPublishThroughBrokerDropsDuplicateIDs(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	_, js := natstest.Connect(t, natstest.Start(t))
	pub := natspub.NewPublisher(js, natspub.StreamConfig{}, nil) // creates the stream on first use

	now := time.Now().UTC()
	events := []outbox.Event{
		testEvent(t, "PaymentCreated", "pay_1", now),
		testEvent(t, "PaymentSucceeded", "pay_1", now.Add(time.Millisecond)),
		testEvent(t, "PaymentCreated", "pay_2", now.Add(2*time.Millisecond)),
	}
	for round := range 2 { // the second round repeats every id, as a relay that crashed before marking would
		for _, e := range events {
			ack, err := pub.PublishAck(ctx, e)
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
			if ack.Duplicate != (round == 1) {
				t.Errorf("round %d, event %s: duplicate = %v", round, e.ID, ack.Duplicate)
			}
		}
	}

	stream, info := defaultStream(t, js)
	if info.State.Msgs != uint64(len(events)) {
		t.Fatalf("stream holds %d messages, want %d: the repeats were not dropped", info.State.Msgs, len(events))
	}
	if info.Config.Duplicates != natspub.DefaultDuplicateWindow {
		t.Errorf("duplicate window = %s", info.Config.Duplicates)
	}

	// Read them back: subject per type, id as message id, body decodes to the event.
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range events {
		msg, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if got := msg.Subject(); got != "payments.events."+want.Type {
			t.Errorf("subject = %q", got)
		}
		if got := msg.Headers().Get(jetstream.MsgIDHeader); got != want.ID {
			t.Errorf("Nats-Msg-Id = %q, want %q", got, want.ID)
		}
		got, err := natspub.Decode(msg.Data())
		if err != nil {
			t.Fatal(err)
		}
		if got.ID != want.ID || got.Type != want.Type || got.AggregateID != want.AggregateID ||
			!got.OccurredAt.Equal(want.OccurredAt) || !jsonEqual(t, got.Payload, want.Payload) {
			t.Errorf("decoded %+v, want %+v", got, want)
		}
	}
}

// TestRepeatAfterWindowIsStored shows why consumers deduplicate too: past
// the stream's window, a repeated id is a new message.
func TestRepeatAfterWindowIsStored(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	_, js := natstest.Connect(t, natstest.Start(t))
	pub := natspub.NewPublisher(js, natspub.StreamConfig{DuplicateWindow: 100 * time.Millisecond}, nil)
	e := testEvent(t, "PaymentSucceeded", "pay_1", time.Now().UTC())
	if err := pub.Publish(ctx, e); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		ack, err := pub.PublishAck(ctx, e)
		if err != nil {
			t.Fatal(err)
		}
		if !ack.Duplicate {
			break // the broker forgot the id
		}
		if time.Now().After(deadline) {
			t.Fatal("the repeat was still dropped 5s after a 100ms window")
		}
		time.Sleep(50 * time.Millisecond)
	}
	_, info := defaultStream(t, js)
	if info.State.Msgs != 2 {
		t.Fatalf("stream holds %d messages, want 2", info.State.Msgs)
	}
}

// TestPublishFailsWithoutServer: with the server gone, Publish fails at once
// (instead of waiting for its context) with ErrBrokerUnavailable, so that
// the relay pauses instead of counting the failure against the event.
func TestPublishFailsWithoutServer(t *testing.T) {
	t.Parallel()
	nc, err := natspub.Connect("nats://127.0.0.1:1", "test", nil) // nothing listens on port 1
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	start := time.Now()
	err = natspub.NewPublisher(js, natspub.StreamConfig{}, nil).Publish(ctx, testEvent(t, "PaymentCreated", "pay_1", time.Now()))
	if !errors.Is(err, outbox.ErrBrokerUnavailable) {
		t.Fatalf("Publish without a server = %v, want ErrBrokerUnavailable", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Publish took %s to fail: it waited for its context", d)
	}
	start = time.Now()
	events := []outbox.Event{testEvent(t, "PaymentCreated", "pay_1", time.Now()), testEvent(t, "PaymentCreated", "pay_2", time.Now())}
	for i, err := range natspub.NewPublisher(js, natspub.StreamConfig{}, nil).PublishBatch(ctx, events) {
		if !errors.Is(err, outbox.ErrBrokerUnavailable) {
			t.Errorf("PublishBatch without a server, event %d: %v, want ErrBrokerUnavailable", i, err)
		}
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("PublishBatch took %s to fail: it waited for its context", d)
	}
}

// TestStreamGoneIsBrokerUnavailable: a stream deleted under the publisher
// fails every event alike (no stream answers), so the failure is the
// broker's; the next publish creates the stream again and succeeds.
func TestStreamGoneIsBrokerUnavailable(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	_, js := natstest.Connect(t, natstest.Start(t))
	pub := natspub.NewPublisher(js, natspub.StreamConfig{}, nil)
	if err := pub.Publish(ctx, testEvent(t, "PaymentCreated", "pay_1", time.Now())); err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteStream(ctx, natspub.DefaultStream); err != nil {
		t.Fatal(err)
	}
	err := pub.Publish(ctx, testEvent(t, "PaymentCreated", "pay_2", time.Now()))
	if !errors.Is(err, outbox.ErrBrokerUnavailable) {
		t.Fatalf("Publish to a deleted stream = %v, want ErrBrokerUnavailable", err)
	}
	if err := pub.Publish(ctx, testEvent(t, "PaymentCreated", "pay_2", time.Now())); err != nil {
		t.Fatalf("Publish after the stream was deleted: %v (want it created again)", err)
	}
}

// TestOversizedEventIsTheEventsFault: an event the broker can never take
// fails as the event's own failure (counted, parked in the end), not as an
// outage that would hold every other event back.
func TestOversizedEventIsTheEventsFault(t *testing.T) {
	t.Parallel()
	_, js := natstest.Connect(t, natstest.Start(t))
	pub := natspub.NewPublisher(js, natspub.StreamConfig{}, nil)
	e := testEvent(t, "PaymentCreated", "pay_1", time.Now())
	e.Payload = json.RawMessage(`"` + strings.Repeat("x", 2<<20) + `"`)
	err := pub.Publish(t.Context(), e)
	if err == nil || errors.Is(err, outbox.ErrBrokerUnavailable) {
		t.Fatalf("Publish of a 2 MiB event = %v, want an error of the event, not ErrBrokerUnavailable", err)
	}
}

func TestBrokerUnavailableClassifiesErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{context.DeadlineExceeded, true},
		{fmt.Errorf("publish event x: %w", nats.ErrTimeout), true},
		{nats.ErrNoResponders, true},
		{jetstream.ErrNoStreamResponse, true},
		{jetstream.ErrJetStreamNotEnabled, true},
		{nats.ErrDisconnected, true},
		{nats.ErrConnectionClosed, true},
		{nats.ErrConnectionDraining, true},
		{nats.ErrConnectionReconnecting, true},
		{nats.ErrNoServers, true},
		{nats.ErrReconnectBufExceeded, true},
		{jetstream.ErrAsyncPublishTimeout, true},
		{fmt.Errorf("publish event x: %w", jetstream.ErrTooManyStalledMsgs), true},
		{fmt.Errorf("nats: %w", &jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}), true},
		{nil, false},
		{context.Canceled, false}, // shutdown: the relay sees it on its own context
		{nats.ErrMaxPayload, false},
		{fmt.Errorf("nats: %w", &jetstream.APIError{Code: 400, ErrorCode: 10060, Description: "expected stream does not match"}), false},
		{errors.New("encode event x: json: unsupported value"), false},
	} {
		if got := natspub.BrokerUnavailable(tc.err); got != tc.want {
			t.Errorf("BrokerUnavailable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestRedactURL(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"nats://127.0.0.1:4222":                          "nats://127.0.0.1:4222",
		"nats://user:s3cret@nats:4222":                   "nats://user:xxxxx@nats:4222",
		"nats://s3cret-token@nats:4222":                  "nats://xxxxx@nats:4222",
		"user:s3cret@nats:4222":                          "user:xxxxx@nats:4222",
		"nats://u:s3cret@a:4222, tls://u:s3cret@b:4222":  "nats://u:xxxxx@a:4222,tls://u:xxxxx@b:4222",
		"nats://user:s3cret@exa mple:4222":               "nats://xxxxx@exa mple:4222",
		"nats://user:s3cret@[::1:4222/path?x=user:pass@": "nats://xxxxx@[::1:4222/path?x=user:pass@",
	} {
		if got := natspub.RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestConnectErrorsHideCredentials: a URL that does not parse is quoted
// whole in the client's error; Connect's error must not carry its password
// or token.
func TestConnectErrorsHideCredentials(t *testing.T) {
	t.Parallel()
	for _, u := range []string{
		"nats://user:s3cret@exa mple:4222",
		"nats://s3cret@host:badport",
		`nats://user:s3"cret@host:badport`,
		"nats://ok@a:4222,nats://user:s3cret@[::1:4222",
	} {
		_, err := natspub.Connect(u, "test", nil)
		if err == nil {
			t.Errorf("Connect(%q) succeeded", u)
			continue
		}
		if msg := err.Error(); strings.Contains(msg, "s3cret") || strings.Contains(msg, `s3\"cret`) || strings.Contains(msg, "cret") {
			t.Errorf("Connect(%q) error shows the credentials: %s", u, msg)
		}
	}
}

func TestDecodeRejectsMalformed(t *testing.T) {
	t.Parallel()
	for _, body := range []string{
		`not json`,
		`{"eventId":"x","type":"PaymentSucceeded","aggregateId":"pay_1"}`,
		`{"eventId":"0190a3c2-7b1e-7c3d-8e4f-123456789abc","type":"","aggregateId":"pay_1"}`,
		`{"eventId":"0190a3c2-7b1e-7c3d-8e4f-123456789abc","type":"PaymentSucceeded"}`,
	} {
		if _, err := natspub.Decode([]byte(body)); !errors.Is(err, natspub.ErrMalformed) {
			t.Errorf("Decode(%s) = %v, want ErrMalformed", body, err)
		}
	}
}

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatal(err)
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return string(xa) == string(ya)
}

// TestPublishBatchThroughBroker: a batch is sent at once and each event gets
// its own result: the ones the stream stored, and an event the broker can
// never take failing alone, as its own fault. Sent again, the stored ones
// are acknowledged as repeats and not stored twice; with the stream gone,
// every event of a batch fails as the broker's fault.
func TestPublishBatchThroughBroker(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	_, js := natstest.Connect(t, natstest.Start(t))
	pub := natspub.NewPublisher(js, natspub.StreamConfig{}, nil)
	now := time.Now().UTC()
	huge := testEvent(t, "PaymentCreated", "pay_2", now)
	huge.Payload = json.RawMessage(`"` + strings.Repeat("x", 2<<20) + `"`)
	events := []outbox.Event{
		testEvent(t, "PaymentCreated", "pay_1", now),
		huge,
		testEvent(t, "PaymentCreated", "pay_3", now),
		testEvent(t, "PaymentSucceeded", "pay_4", now),
	}
	for round := range 2 {
		errs := pub.PublishBatch(ctx, events)
		for i, err := range errs {
			if bad := i == 1; (err != nil) != bad || errors.Is(err, outbox.ErrBrokerUnavailable) {
				t.Errorf("round %d, event %d: %v", round, i, err)
			}
		}
	}
	if _, info := defaultStream(t, js); info.State.Msgs != 3 {
		t.Errorf("stream holds %d messages, want the 3 the broker could take, once", info.State.Msgs)
	}
	// A batch whose time ran out before it could be sent fails as the
	// broker's fault (the relay hands it back uncounted), not the events',
	// and is not sent: the relay's claim may be running out.
	late, cancel := context.WithDeadline(ctx, time.Now().Add(-time.Second))
	defer cancel()
	unsent := []outbox.Event{testEvent(t, "PaymentCreated", "pay_5", now), testEvent(t, "PaymentCreated", "pay_6", now)}
	for i, err := range pub.PublishBatch(late, unsent) {
		if !errors.Is(err, outbox.ErrBrokerUnavailable) {
			t.Errorf("event %d of a batch out of time: %v, want ErrBrokerUnavailable", i, err)
		}
	}
	// A publish on the same connection after it: the server has seen
	// whatever the late batch sent by the time this one is acknowledged.
	if err := pub.Publish(ctx, testEvent(t, "PaymentCreated", "pay_7", now)); err != nil {
		t.Fatal(err)
	}
	if _, info := defaultStream(t, js); info.State.Msgs != 4 {
		t.Errorf("stream holds %d messages after a batch out of time, want 4: the late batch was sent", info.State.Msgs)
	}
	if err := js.DeleteStream(ctx, natspub.DefaultStream); err != nil {
		t.Fatal(err)
	}
	for i, err := range pub.PublishBatch(ctx, events[2:]) {
		if !errors.Is(err, outbox.ErrBrokerUnavailable) {
			t.Errorf("event %d to a deleted stream: %v, want ErrBrokerUnavailable", i, err)
		}
	}
}
