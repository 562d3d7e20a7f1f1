package answercache_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/paymentsapi/paymentsapi/internal/answercache"
	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/metrics"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// finishing is an operation that finishes every key it resumes with a
// 201, and counts its resumes.
type finishing struct{ resumes *atomic.Int32 }

type done struct{}

func (done) Outcome() string { return "done" }

func (finishing) Name() string { return "widgets.create" }
func (o finishing) Resume(ctx context.Context, own *idempotency.Owner) (idempotency.Result, error) {
	o.resumes.Add(1)
	b := &pgx.Batch{}
	if err := own.QueueFinish(b, done{}); err != nil {
		return nil, err
	}
	return done{}, own.Commit(ctx, b)
}
func (finishing) Render(idempotency.Result) (idempotency.Response, error) {
	return idempotency.Response{Status: 201, Body: []byte(`{"id":"w_1"}`), Headers: map[string]string{"Content-Type": "application/json"}}, nil
}

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// engine is an engine on pool with mem as its cache of answers (nil: none).
func engine(pool *pgxpool.Pool, clk clock.Clock, mem *answercache.Memory) *idempotency.Engine {
	d := idempotency.Deps{DB: pool, Clock: clk, Log: discard, Metrics: metrics.New(prometheus.NewRegistry())}
	if mem != nil {
		d.Answers = mem
	}
	return idempotency.NewEngine(d, idempotency.Config{ReplayTTL: time.Hour, Lease: time.Minute, CommitMode: pgtest.CommitMode()})
}

// watched is a database, a clock and a cache that has just looked at the
// database's server.
func watched(t *testing.T) (*pgxpool.Pool, *clock.Fake, *answercache.Memory) {
	pool := pgtest.NewPool(t)
	clk := clock.NewFake(time.Now())
	mem := answercache.New(pool, clk, discard)
	mem.Look(context.Background())
	return pool, clk, mem
}

func request(fingerprint byte) idempotency.Request {
	return idempotency.Request{
		Scope:       idempotency.Scope{Tenant: "t", Operation: "widgets.create", Key: "k"},
		Fingerprint: []byte{fingerprint},
		Resource:    idempotency.Resource{Type: "widget", ID: "w_1"},
	}
}

// do runs req and fails the test on an error.
func do(t *testing.T, e *idempotency.Engine, op idempotency.Operation, req idempotency.Request) idempotency.Reply {
	t.Helper()
	reply, err := e.Do(context.Background(), op, req)
	if err != nil {
		t.Fatal(err)
	}
	return reply
}

// The key's record is deleted behind the engines' back after a retry was
// replayed: a retry through the engine with the cache is still replayed
// (from memory, without a read), and one through an engine without a cache
// finds no key and creates the widget again. So the cache answers, and only
// when it is given.
func TestARetryOfAFinishedKeyIsReplayedFromMemory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, clk, mem := watched(t)
	cached, plain := engine(pool, clk, mem), engine(pool, clk, nil)
	var resumes atomic.Int32
	op := finishing{&resumes}

	if r := do(t, cached, op, request(1)); r.Replayed || r.Response.Status != 201 {
		t.Fatalf("first request: replayed %v, status %d; want a fresh 201", r.Replayed, r.Response.Status)
	}
	if r := do(t, cached, op, request(1)); !r.Replayed {
		t.Fatal("a retry read from the database was not a replay")
	}
	if _, err := pool.Exec(ctx, `DELETE FROM idempotency_keys`); err != nil {
		t.Fatal(err)
	}
	if r := do(t, cached, op, request(1)); !r.Replayed || string(r.Response.Body) != `{"id":"w_1"}` {
		t.Fatalf("a retry with the cache: replayed %v, body %s; want the kept answer", r.Replayed, r.Response.Body)
	}
	if resumes.Load() != 1 {
		t.Fatalf("the operation ran %d times with the cache; want 1", resumes.Load())
	}
	if r := do(t, plain, op, request(1)); r.Replayed {
		t.Fatal("an engine without a cache replayed a key the database no longer holds")
	}
	if resumes.Load() != 2 {
		t.Fatalf("the operation ran %d times; want 2 (the engine without a cache created it again)", resumes.Load())
	}
}

// A kept answer is replayed only for the same command: another command
// under the key is read from the database and refused as reused.
func TestTheCacheReplaysOnlyTheSameCommand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, clk, mem := watched(t)
	e := engine(pool, clk, mem)
	op := finishing{new(atomic.Int32)}
	do(t, e, op, request(1))
	do(t, e, op, request(1)) // read, kept
	if _, err := e.Do(ctx, op, request(2)); err != idempotency.ErrKeyReused {
		t.Fatalf("another command under a kept key: %v; want ErrKeyReused", err)
	}
}

// The cache answers only while its last look at the server is fresh, and
// forgets what it kept when a look finds another server (here: another
// database, as a promoted standby is another server); and for a while
// after, it keeps nothing, since a read begun before the switch may have
// been answered by the old server.
func TestTheCacheAnswersOnlyFromTheServerItLookedAt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	first, second := pgtest.NewPool(t), pgtest.NewPool(t)
	clk := clock.NewFake(time.Now())
	db := &switchable{to: first}
	mem := answercache.New(db, clk, discard)
	scope := request(1).Scope
	completed := clk.Now()
	rec := idempotency.Record{Scope: scope, Fingerprint: []byte{1}, CompletedAt: &completed,
		Response: &idempotency.Response{Status: 201, Body: []byte(`{}`)}}

	mem.Keep(scope, rec)
	if _, ok := mem.Answer(scope); ok {
		t.Fatal("kept and answered before any look at the server")
	}
	mem.Look(ctx)
	mem.Keep(scope, rec)
	if _, ok := mem.Answer(scope); !ok {
		t.Fatal("not answered from a fresh server")
	}
	clk.Advance(time.Second)
	if _, ok := mem.Answer(scope); ok {
		t.Fatal("answered a second after the last look")
	}
	mem.Look(ctx)
	if _, ok := mem.Answer(scope); !ok {
		t.Fatal("not answered after a look found the same server")
	}

	db.to = second
	mem.Look(ctx)
	if _, ok := mem.Answer(scope); ok {
		t.Fatal("answered after a look found another server")
	}
	mem.Keep(scope, rec)
	if _, ok := mem.Answer(scope); ok {
		t.Fatal("kept an answer right after the server changed")
	}
	clk.Advance(11 * time.Second)
	mem.Look(ctx)
	mem.Keep(scope, rec)
	if _, ok := mem.Answer(scope); !ok {
		t.Fatal("nothing kept once the quarantine after the change was over")
	}
}

// switchable reads through one pool, then another: the server the cache
// looks at changes, as it does in a failover.
type switchable struct{ to *pgxpool.Pool }

func (s *switchable) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return s.to.QueryRow(ctx, sql, args...)
}
