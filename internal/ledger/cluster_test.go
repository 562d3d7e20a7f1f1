package ledger_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/outbox"
	"github.com/paymentsapi/paymentsapi/internal/outbox/natspub"
	"github.com/paymentsapi/paymentsapi/internal/outbox/natspub/natstest"
	"github.com/paymentsapi/paymentsapi/internal/outbox/stream"
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
	streamCfg := natspub.StreamConfig{}.WithDefaults()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// The meta leader may be elected before it has heard from every peer:
	// until then an R3 stream finds "no suitable peers for placement".
	var s jetstream.Stream
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		s, err = js.CreateStream(ctx, jetstream.StreamConfig{
			Name: streamCfg.Name, Subjects: []string{streamCfg.SubjectPrefix + ".>"}, Storage: jetstream.FileStorage,
			Duplicates: streamCfg.DuplicateWindow, Replicas: 3,
		})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("create the R3 stream: %v", err)
		}
	}

	// The hook holds the relay, once a batch took it past its sixtieth
	// published event, until the node is gone (the batch is then confirmed
	// and the relay goes on), so that the node goes in the middle of the
	// traffic however fast or slow the machine is.
	var (
		seen     atomic.Int32
		reached  = make(chan struct{})
		nodeGone = make(chan struct{})
		killAt   = 60
	)
	afterPublish := func(ctx context.Context, batch []outbox.Event) error {
		n := int(seen.Add(int32(len(batch))))
		if n-len(batch) < killAt && n >= killAt {
			close(reached)
			select {
			case <-nodeGone:
			case <-ctx.Done():
			}
		}
		return nil
	}
	// Retries at most a second apart while the stream elects its new
	// leader.
	pub := &acceptedIDs{next: natspub.NewPublisher(js, streamCfg, nil), ids: map[string]bool{}}
	relay := stream.NewRelay(stream.RelayDeps{ConnString: e.pool.Config().ConnConfig.ConnString(), DB: e.pool, Publisher: pub, Clock: clock.System{}},
		stream.RelayConfig{BatchSize: 5, SendConfig: outbox.SendConfig{MaxBackoff: time.Second}, Standby: 50 * time.Millisecond, AfterPublish: afterPublish})
	// The slot is created before the payments (an empty RunOnce), so that
	// their events come through its stream, batch by batch, not through a
	// new slot's catch-up (which runs no hook).
	if n, err := relay.RunOnce(ctx); err != nil || n != 0 {
		t.Fatalf("create the slot: published %d, %v", n, err)
	}
	relay.Close(ctx)

	amounts, declined := e.createPayments(120)
	var events int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM outbox_events`).Scan(&events); err != nil {
		t.Fatal(err)
	}

	rctx, stopRelay := context.WithCancel(ctx)
	relayDone := make(chan struct{})
	go func() { defer close(relayDone); relay.Run(rctx) }()
	defer func() { stopRelay(); <-relayDone }()

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
	t.Logf("stream leader %s shut down after %d of %d events were published", info.Cluster.Leader, seen.Load(), events)

	// Published: every event of the outbox acknowledged by the broker to
	// the relay's publisher.
	for pub.count() < events {
		if ctx.Err() != nil {
			t.Fatalf("the relay published %d of %d events after the node went", pub.count(), events)
		}
		time.Sleep(20 * time.Millisecond)
	}

	b := &broker{t: t, js: js, stream: streamCfg}
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
	// The stream's count is its new leader's, which may still be applying
	// what the old one replicated when asked: it is read until it holds
	// every event, for a few seconds (a message lost stays lost).
	var msgs uint64
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		info, err = s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if msgs = info.State.Msgs; msgs == uint64(events) || time.Now().After(deadline) {
			break
		}
	}
	if msgs != uint64(events) {
		t.Errorf("the stream holds %d messages for %d events", msgs, events)
	}
}

// acceptedIDs is a publisher that remembers the ids of the events next
// accepted.
type acceptedIDs struct {
	next outbox.BatchPublisher
	mu   sync.Mutex
	ids  map[string]bool
}

func (p *acceptedIDs) Publish(ctx context.Context, e outbox.Event) error {
	err := p.next.Publish(ctx, e)
	p.accepted([]outbox.Event{e}, []error{err})
	return err
}

func (p *acceptedIDs) PublishBatch(ctx context.Context, events []outbox.Event) []error {
	errs := p.next.PublishBatch(ctx, events)
	p.accepted(events, errs)
	return errs
}

func (p *acceptedIDs) accepted(events []outbox.Event, errs []error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, err := range errs {
		if err == nil {
			p.ids[events[i].ID] = true
		}
	}
}

// count is how many distinct events were accepted.
func (p *acceptedIDs) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ids)
}
