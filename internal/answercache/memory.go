// Package answercache holds Memory, the one cache of final answers the
// idempotency engine can be given (idempotency.Answers): a retry of a key
// that finished lately is replayed from process memory, without a read of
// its record. It is off by default (REPLAY_CACHE=memory turns it on).
//
// What it buys is the speed of replays: a replay costs an indexed read
// without it. What it costs is a window after a database failover, which is
// why it is not the default: a failover to an asynchronous standby can lose
// the last commits, and a retry must then find no key and create the
// resource again. A cache that kept the lost answer would replay a 201 for
// a payment the new primary does not hold. So Memory looks at the database
// server every lookEvery and
//   - answers only while its last look that found the server is at most
//     fresh old: a server that stops answering (the primary is down, the
//     failover under way) stops it at once;
//   - forgets everything when a look finds another server (a promoted
//     standby is another postmaster, and so is a restart) or finds none;
//   - keeps nothing for quarantine after such a change: a read that
//     started on the old server ends within that time, and its answer is
//     not kept.
//
// The window left: an answer kept just before a crash is replayed for up
// to fresh after it, before a look notices; and a connection the pool
// still holds to an old primary that comes back after the switch (frozen,
// not crashed) can read its answers, which is as wrong with the cache as
// without it. docs/operations.md says when to turn it on.
package answercache

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/idempotency"
)

const (
	// perGeneration is how many answers a generation holds: Memory holds
	// the last perGeneration to twice that many.
	perGeneration = 1 << 12
	// keepFor is how long after its completion an answer is replayed from
	// memory: a client's retries come within seconds or minutes.
	keepFor    = 10 * time.Minute
	lookEvery  = 100 * time.Millisecond
	fresh      = 3 * lookEvery
	quarantine = 10 * time.Second // the engine's bound on one statement
)

// identitySQL tells one server from another: its address, port and
// postmaster's start time (a promoted standby is another postmaster, and so
// is a restart), and the database; "" on a standby, whose answers must not
// be kept. Any role may read them.
const identitySQL = `SELECT CASE WHEN pg_is_in_recovery() THEN ''
	ELSE concat_ws('/', inet_server_addr(), inet_server_port(), pg_postmaster_start_time(), current_database()) END`

// Querier is what Memory reads the server's identity through: a pool.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Memory is an idempotency.Answers held in process memory. Run Watch for
// it to answer anything.
type Memory struct {
	db    Querier
	clock clock.Clock
	log   *slog.Logger

	mu         sync.Mutex
	young, old map[idempotency.Scope]idempotency.Record
	server     string    // the identity of the server the answers are from; "" none
	seenAt     time.Time // when a look last found it
	changedAt  time.Time // when a look last found another server, or none, after the first
}

// New returns a Memory that watches the server behind db.
func New(db Querier, clk clock.Clock, log *slog.Logger) *Memory {
	return &Memory{db: db, clock: clk, log: log, young: make(map[idempotency.Scope]idempotency.Record)}
}

// Answer returns the record kept for scope, while the server is fresh and
// the answer at most keepFor old.
func (m *Memory) Answer(scope idempotency.Scope) (idempotency.Record, bool) {
	now := m.clock.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.freshAt(now) {
		return idempotency.Record{}, false
	}
	rec, ok := m.young[scope]
	if !ok {
		rec, ok = m.old[scope]
	}
	if !ok || rec.CompletedAt == nil || !now.Before(rec.CompletedAt.Add(keepFor)) {
		return idempotency.Record{}, false
	}
	return rec, true
}

// Keep remembers rec for scope if it is a final answer, the server is
// fresh, and it has not changed within quarantine.
func (m *Memory) Keep(scope idempotency.Scope, rec idempotency.Record) {
	if rec.CompletedAt == nil || rec.Response == nil {
		return
	}
	now := m.clock.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.freshAt(now) || now.Sub(m.changedAt) < quarantine {
		return
	}
	if len(m.young) >= perGeneration {
		m.old, m.young = m.young, make(map[idempotency.Scope]idempotency.Record, perGeneration)
	}
	m.young[scope] = rec
}

// freshAt reports whether the last look found the server at most fresh
// before now. m.mu is held.
func (m *Memory) freshAt(now time.Time) bool {
	return m.server != "" && now.Sub(m.seenAt) <= fresh
}

// Watch looks at the server every lookEvery until ctx ends.
func (m *Memory) Watch(ctx context.Context) {
	t := time.NewTicker(lookEvery)
	defer t.Stop()
	for {
		m.Look(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Look is one look at the server: Watch's, or a test's.
func (m *Memory) Look(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, fresh)
	defer cancel()
	var id string
	if err := m.db.QueryRow(ctx, identitySQL).Scan(&id); err != nil {
		id = ""
	}
	now := m.clock.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if id != m.server {
		if m.server != "" {
			m.log.WarnContext(ctx, "answer cache: the database server changed or cannot be reached; forgetting every answer", "server_found", id != "")
		}
		if m.server != "" || !m.seenAt.IsZero() {
			m.changedAt = now // not the first server found: answers read before may be the old one's
		}
		m.server = id
		m.young, m.old = make(map[idempotency.Scope]idempotency.Record), nil
	}
	if id != "" {
		m.seenAt = now
	}
}
