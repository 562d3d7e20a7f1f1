package ledger_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/outbox"
	"github.com/paymentsapi/paymentsapi/internal/outbox/natspub"
	"github.com/paymentsapi/paymentsapi/internal/outbox/natspub/natstest"
)

// TestThreeNodeBrokerLosesANodeDuringRelayTraffic: the relay publishes to a
// 3-node JetStream cluster whose stream is replicated three times (R3, as
// an operator creates it: EnsureStream uses an existing stream as it is).
// The node leading the stream is shut down while the relay is publishing.
// Publishing resumes on the new leader, and every event reaches the ledger,
// which books one entry per succeeded payment.
func TestThreeNodeBrokerLosesANodeDuringRelayTraffic(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cluster := natstest.StartCluster(t, 3)
	nc, err := nats.Connect(cluster.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	stream := natspub.StreamConfig{}.WithDefaults()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// The meta leader may be elected before it has heard from every peer:
	// until then an R3 stream finds "no suitable peers for placement".
	var s jetstream.Stream
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		s, err = js.CreateStream(ctx, jetstream.StreamConfig{
			Name: stream.Name, Subjects: []string{stream.SubjectPrefix + ".>"}, Storage: jetstream.FileStorage,
			Duplicates: stream.DuplicateWindow, Replicas: 3,
		})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("create the R3 stream: %v", err)
		}
	}

	amounts, declined := e.createPayments(120)
	var events int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM outbox_events`).Scan(&events); err != nil {
		t.Fatal(err)
	}

	// The hook holds the relay after its sixtieth publish until the node
	// is gone, so that the node goes in the middle of the traffic however
	// fast or slow the machine is.
	var (
		seen     atomic.Int32
		reached  = make(chan struct{})
		nodeGone = make(chan struct{})
		killAt   = 60
	)
	hooks := outbox.RelayHooks{AfterPublish: func(ctx context.Context, _ outbox.Event) error {
		if int(seen.Add(1)) == killAt {
			close(reached)
			select {
			case <-nodeGone:
			case <-ctx.Done():
			}
		}
		return nil
	}}
	// The relay runs on the real clock: it pauses after a broker outage
	// until a time it reads from its clock.
	relay, err := outbox.NewRelay(outbox.RelayDeps{DB: e.pool, Publisher: natspub.NewPublisher(js, stream, nil), Clock: clock.System{}},
		outbox.RelayConfig{Lease: 30 * time.Second, BatchSize: 5, Hooks: hooks})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stopRelay := context.WithCancel(ctx)
	relayDone := make(chan struct{})
	go func() { defer close(relayDone); relay.Run(rctx, 20*time.Millisecond) }()
	defer func() { stopRelay(); <-relayDone }()

	published := func() int {
		var n int
		if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM outbox_events WHERE published_at IS NOT NULL`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	select {
	case <-reached:
	case <-ctx.Done():
		t.Fatal("the relay did not publish 60 events")
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	leader := cluster.Server(info.Cluster.Leader)
	if leader == nil {
		t.Fatalf("stream leader %q is not a running server", info.Cluster.Leader)
	}
	leader.Shutdown()
	close(nodeGone)
	t.Logf("stream leader %s shut down after %d of %d events were published", info.Cluster.Leader, killAt, events)

	for published() < events {
		if ctx.Err() != nil {
			t.Fatalf("the relay published %d of %d events after the node went", published(), events)
		}
		time.Sleep(20 * time.Millisecond)
	}

	b := &broker{t: t, js: js, stream: stream}
	b.consume(e.proj)
	b.waitIdle()
	e.wantOneEntryPerSucceededPayment(amounts, declined)
	// The ledger's consumer reads the events it books (PaymentSucceeded
	// here); the stream must hold every event exactly once, whatever the
	// relay had to publish again when the leader went (its message ids
	// are the event ids, deduplicated by the replicated stream).
	var inbox int
	if err := e.pool.QueryRow(ctx, `SELECT count(DISTINCT event_id) FROM inbox`).Scan(&inbox); err != nil {
		t.Fatal(err)
	}
	if inbox != len(amounts) {
		t.Errorf("the ledger received %d distinct events, want %d (one per succeeded payment)", inbox, len(amounts))
	}
	info, err = s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != uint64(events) {
		t.Errorf("the stream holds %d messages for %d events", info.State.Msgs, events)
	}
}
