package httpapi_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
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

// take returns what was sent since the last take.
func (r *roundTrips) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	sent := r.sent
	r.sent = nil
	return sent
}

// TestEachStepIsOneRoundTrip: a new payment reaches the database in three
// round trips (the claim with the payment and its event; the key held and
// the payment moved before the provider call; the answer stored with the
// final move and its event), each one implicit transaction; a replay in
// one. BEGIN, COMMIT, a read-back or an API-key lookup on the hot path
// would each show here as one more.
func TestEachStepIsOneRoundTrip(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	trips := &roundTrips{}
	cfg := e.pool.Config()
	cfg.ConnConfig.Tracer = trips
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	e.url, _, _ = startInstance(t, pool, e.prov, e.clock, e.cfg, e.limit)

	if r := e.post("k-warm", body("merchantReference", `"inv-warm"`)); r.Status != http.StatusCreated {
		t.Fatalf("warm-up: %d %s", r.Status, r.Body) // fills the API-key cache
	}
	trips.take()

	if r := e.post("k-new", body()); r.Status != http.StatusCreated {
		t.Fatalf("new payment: %d %s", r.Status, r.Body)
	}
	if sent := trips.take(); len(sent) != 3 {
		t.Errorf("a new payment took %d round trips, want 3:\n%s", len(sent), strings.Join(sent, "\n"))
	}
	if r := e.post("k-new", body()); r.Status != http.StatusCreated || r.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %d %v %s", r.Status, r.Header, r.Body)
	}
	if sent := trips.take(); len(sent) != 1 {
		t.Errorf("a replay took %d round trips, want 1:\n%s", len(sent), strings.Join(sent, "\n"))
	}
}
