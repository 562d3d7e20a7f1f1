package natspub_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/paymentsapi/paymentsapi/internal/outbox"
	"github.com/paymentsapi/paymentsapi/internal/outbox/natspub"
	"github.com/paymentsapi/paymentsapi/internal/outbox/natspub/natstest"
)

func testEvent(t *testing.T, typ, paymentID string, at time.Time) outbox.Event {
	t.Helper()
	e, err := outbox.NewEvent(typ, paymentID, map[string]string{"paymentId": paymentID, "status": "SUCCEEDED"}, at)
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
		testEvent(t, outbox.TypePaymentCreated, "pay_1", now),
		testEvent(t, outbox.TypePaymentSucceeded, "pay_1", now.Add(time.Millisecond)),
		testEvent(t, outbox.TypePaymentCreated, "pay_2", now.Add(2*time.Millisecond)),
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
	e := testEvent(t, outbox.TypePaymentSucceeded, "pay_1", time.Now().UTC())
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

// TestPublishFailsWithoutServer: with the server gone, Publish fails (the
// relay then backs off) instead of hanging past its context.
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
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	err = natspub.NewPublisher(js, natspub.StreamConfig{}, nil).Publish(ctx, testEvent(t, outbox.TypePaymentCreated, "pay_1", time.Now()))
	if err == nil {
		t.Fatal("Publish succeeded without a server")
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
