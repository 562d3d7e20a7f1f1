package delivery_test

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/paymentsapi/paymentsapi/internal/delivery"
)

// Two workers on one database, running at once in real goroutines, send
// every message once and never one message twice at the same time (the
// receiver counts the requests in flight per endpoint and webhook-id), and
// both take part.
func TestTwoWorkersNeverSendOneMessageAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, devPolicy, nil)
	paths := []string{"/p1", "/p2", "/p3"}
	for _, p := range paths {
		e.hook(tenantA, p)
		e.recv.answer(p, func(w http.ResponseWriter, _ *http.Request) {
			time.Sleep(2 * time.Millisecond) // long enough for the other worker to try the same message
			w.WriteHeader(http.StatusOK)
		})
	}
	const events = 100
	var want []string
	for range events {
		want = append(want, e.record("tenant_a", succeeded))
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var workers []*delivery.Metrics
	for range 2 {
		m := delivery.NewMetrics(prometheus.NewRegistry(), e.pool, e.clk, slog.New(slog.DiscardHandler))
		workers = append(workers, m)
		w := e.workerWith(delivery.Config{Interval: time.Millisecond}, m)
		wg.Go(func() { w.Run(ctx) })
	}
	waitFor(t, 30*time.Second, "every message delivered", func() bool {
		var n int
		_ = e.pool.QueryRow(context.Background(), `SELECT count(*) FROM webhook_messages WHERE status = 'delivered'`).Scan(&n)
		return n == events*len(paths)
	})
	cancel()
	wg.Wait()

	e.recv.mu.Lock()
	maxInFlight, maxPerPath := e.recv.maxInFlight, e.recv.maxPerPath
	e.recv.mu.Unlock()
	if maxInFlight != 1 {
		t.Errorf("one message was being sent %d times at once", maxInFlight)
	}
	for _, p := range paths {
		seen := map[string]int{}
		for _, id := range e.recv.ids(p) {
			seen[id]++
		}
		for _, id := range want {
			if seen[id] != 1 {
				t.Errorf("%s got %s %d times, want once", p, id, seen[id])
			}
		}
		// Four in flight per endpoint, give or take what two claims made
		// at the same instant counted of each other's.
		if maxPerPath[p] > 2*4 {
			t.Errorf("%s had %d requests in flight at once", p, maxPerPath[p])
		}
	}
	for i, m := range workers {
		var d dto.Metric
		if err := m.Attempts.WithLabelValues("delivered").Write(&d); err != nil || d.GetCounter().GetValue() == 0 {
			t.Errorf("worker %d delivered nothing: the test did not run two workers at once", i)
		}
	}
}

// An endpoint that does not answer holds only its own share of messages
// in flight: another endpoint's messages, old and new, are delivered
// meanwhile, by the same worker.
func TestSlowEndpointDoesNotDelayOthers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, devPolicy, nil)
	e.hook(tenantA, "/slow")
	e.hook(tenantA, "/fast")
	release := make(chan struct{})
	e.recv.answer("/slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
		w.WriteHeader(http.StatusOK)
	})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) }) // before the receiver closes, which waits for its handlers

	w := e.worker(delivery.Config{Timeout: time.Minute, Interval: 5 * time.Millisecond, Concurrency: 8, PerEndpoint: 4})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { w.Run(ctx) })
	defer func() {
		once.Do(func() { close(release) })
		cancel()
		wg.Wait()
	}()

	for round := 1; round <= 3; round++ {
		for range 10 {
			e.record("tenant_a", succeeded)
		}
		waitFor(t, 10*time.Second, "the fast endpoint's messages", func() bool { return len(e.recv.ids("/fast")) == 10*round })
	}
	if got := len(e.recv.ids("/slow")); got != 4 {
		t.Errorf("the slow endpoint had %d messages sent to it, want its 4 in flight", got)
	}
	once.Do(func() { close(release) })
	waitFor(t, 10*time.Second, "the slow endpoint's messages, once it answers", func() bool {
		return len(e.recv.ids("/slow")) == 30
	})
}

// A worker that dies while sending (here: its send never returns before
// the end) leaves the message to its lease: nobody else sends it until the
// lease runs out, then another worker does (at least once); the dead
// worker's late answer is not booked and changes nothing.
func TestKilledWorkersMessageIsSentAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t, devPolicy, nil)
	ep := e.hook(tenantA, "/hook")
	first, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	e.recv.answer("/hook", func(w http.ResponseWriter, _ *http.Request) {
		if calls.Add(1) == 1 {
			close(first)
			<-release
			w.WriteHeader(http.StatusInternalServerError) // the dead worker's attempt, answered too late
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	ev := e.record("tenant_a", succeeded)

	cfg := delivery.Config{Timeout: 30 * time.Second, Lease: time.Minute}
	dead := e.worker(cfg)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = dead.RunOnce(context.Background())
	}()
	<-first
	other := e.worker(cfg)
	if n := e.runOnce(other); n != 0 {
		t.Fatalf("another worker claimed a message under a live lease")
	}
	e.clk.Advance(cfg.Lease + time.Millisecond)
	if n := e.runOnce(other); n != 1 {
		t.Fatalf("after the lease, claimed %d, want the message", n)
	}
	close(release)
	<-done

	if got := e.messages(ep.id); got["delivered"] != 1 || len(got) != 1 {
		t.Errorf("messages %v, want one delivered", got)
	}
	log := e.deliveries(tenantA, ev)
	if len(log) != 1 || log[0]["statusCode"] != float64(200) {
		t.Errorf("attempts %v, want only the second worker's 200", log)
	}
	if ids := e.recv.ids("/hook"); len(ids) != 2 || ids[0] != ev || ids[1] != ev {
		t.Errorf("received %v, want the event twice", ids)
	}
}

// An endpoint's backlog is sent continuously, its share at a time: each
// send that ends lets the worker claim the endpoint's next message at once,
// not at the next interval.
func TestBacklogDrainsWithoutWaitingForTheInterval(t *testing.T) {
	t.Parallel()
	e := newEnv(t, devPolicy, nil)
	e.hook(tenantA, "/busy")
	for range 20 {
		e.record("tenant_a", succeeded)
	}
	w := e.worker(delivery.Config{Interval: time.Hour, PerEndpoint: 2})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { w.Run(ctx) })
	defer func() {
		cancel()
		wg.Wait()
	}()
	waitFor(t, 10*time.Second, "the backlog, two at a time", func() bool { return len(e.recv.ids("/busy")) == 20 })
	e.recv.mu.Lock()
	defer e.recv.mu.Unlock()
	if n := e.recv.maxPerPath["/busy"]; n > 2 {
		t.Errorf("%d sends at once to one endpoint, want at most its share of 2", n)
	}
}
