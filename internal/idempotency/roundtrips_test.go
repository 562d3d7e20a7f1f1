package idempotency_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
	"github.com/paymentsapi/paymentsapi/internal/servicetest"
)

// roundTrips records every statement and batch that reaches PostgreSQL
// through a pool: each is one round trip.
type roundTrips struct {
	mu   sync.Mutex
	sent []string // "query: <sql>" or "batch of n: <first sql>"
}

func (r *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.add("query: " + d.SQL)
	return ctx
}

func (r *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (r *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	first := ""
	if len(d.Batch.QueuedQueries) > 0 {
		first = d.Batch.QueuedQueries[0].SQL
	}
	r.add("batch: " + first)
	return ctx
}

func (r *roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (r *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

func (r *roundTrips) add(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sent = append(r.sent, strings.Join(strings.Fields(s), " "))
}

// seen reports whether a statement starting with prefix was sent since the
// last take.
func (r *roundTrips) seen(prefix string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.sent {
		if strings.HasPrefix(s, prefix) {
			return true
		}
	}
	return false
}

// take returns what was sent since the last take.
func (r *roundTrips) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	sent := r.sent
	r.sent = nil
	return sent
}

// flushes counts the writes to PostgreSQL's sockets of a pool: pgx sends
// each round trip in one write, including the ones the tracer does not see
// (preparing a statement that is not in a connection's cache, or dropping
// one the cache gave up).
type flushes struct {
	mu sync.Mutex
	n  int
}

func (f *flushes) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, f: f}, nil
}

func (f *flushes) take() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.n
	f.n = 0
	return n
}

type countingConn struct {
	net.Conn
	f *flushes
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.f.mu.Lock()
	c.f.n++
	c.f.mu.Unlock()
	return c.Conn.Write(p)
}

// TestEachStepIsOneRoundTrip: with the group committer, a new payment
// reaches the database in two round trips (the claim with the payment, its
// event and its move to sent before the provider call; the answer stored
// with the final move and its event), each one implicit transaction; a
// replay on the instance that saw its key in one (the read of its record:
// idempotency's hints). A BEGIN, a COMMIT, a read-back or an API-key lookup
// on the hot path would each show here as one more. The inline committer
// claims step by step instead: BEGIN, the claim, the statements that create
// the payment, COMMIT, then the answer in one round trip (five); a replay
// is BEGIN, the claim that finds the key taken, ROLLBACK and the read of
// the record (four). The pool has one connection, so that a
// request that spoiled the connection's statement cache (pgx drops the
// cached statements of a batch that fails) shows in the requests after it:
// each would pay a round trip to drop them and another to prepare them
// again.
func TestEachStepIsOneRoundTrip(t *testing.T) {
	t.Parallel()
	e := servicetest.New(t)
	trips, writes := &roundTrips{}, &flushes{}
	cfg := e.Pool.Config()
	cfg.MaxConns = 1
	// pgxpool pings a connection idle for over a second when it hands it
	// out: a write the tracer does not see. Under load a request may wait
	// that long; no ping, so that only the requests' own writes count.
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	cfg.ConnConfig.Tracer = trips
	cfg.ConnConfig.DialFunc = writes.dial
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	e.URL, _, _ = servicetest.StartInstance(t, pool, e.Provider, e.Clock, e.Config, e.RateLimit)
	// The instance's listener connects with the pool's configuration, so
	// its round trips are counted too: wait until it listens, or its LISTEN
	// would be counted against whichever request it happened beside.
	for deadline := time.Now().Add(30 * time.Second); !trips.seen("query: LISTEN "); {
		if time.Now().After(deadline) {
			t.Fatal("the instance's listener did not LISTEN within 30s")
		}
		time.Sleep(10 * time.Millisecond)
	}

	// expect checks what the last request sent: n round trips, as the
	// tracer sees them and on the wire.
	expect := func(what string, n int) {
		t.Helper()
		sent, wire := trips.take(), writes.take()
		if len(sent) != n || wire != n {
			t.Errorf("%s took %d round trips (%d writes on the wire), want %d:\n%s",
				what, len(sent), wire, n, strings.Join(sent, "\n"))
		}
	}
	for range 2 { // fills the API-key cache and the statement cache (a replay's read too)
		if r := e.Post("k-warm", servicetest.Body("merchantReference", `"inv-warm"`)); r.Status != http.StatusCreated {
			t.Fatalf("warm-up: %d %s", r.Status, r.Body)
		}
	}
	trips.take()
	writes.take()

	newTrips, replayTrips := 2, 1
	if pgtest.CommitMode() == idempotency.CommitInline {
		newTrips, replayTrips = 5, 4
	}
	if r := e.Post("k-new", servicetest.Body()); r.Status != http.StatusCreated {
		t.Fatalf("new payment: %d %s", r.Status, r.Body)
	}
	expect("a new payment", newTrips)
	for i := range 2 {
		if r := e.Post("k-new", servicetest.Body()); r.Status != http.StatusCreated || r.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("replay: %d %v %s", r.Status, r.Header, r.Body)
		}
		expect(fmt.Sprintf("replay %d", i+1), replayTrips)
	}
	if r := e.Post("k-after", servicetest.Body("merchantReference", `"inv-after"`)); r.Status != http.StatusCreated {
		t.Fatalf("new payment after the replays: %d %s", r.Status, r.Body)
	}
	expect("a new payment after the replays", newTrips)
}
