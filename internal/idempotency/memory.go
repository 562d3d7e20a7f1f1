package idempotency

import (
	"context"
	"sync"
	"time"
)

// memory holds the final answers this engine committed or replayed from
// the database lately, so that a retry of a finished key is replayed
// without reading its record: a final
// answer never changes, and the same Decide answers the retry from it. It
// answers only the plain replay (the same command, inside the replay
// window); everything else reads the record.
//
// It must not replay what the database no longer has. A database failover
// to an asynchronous standby can lose the last commits, and a retry must
// then find no key and create the resource again, under its derived id
// (docs/BENCHMARKS.md, issue 22: a first memory, without what follows,
// replayed a 201 for a payment the new primary did not have, until the
// replay window ended). So WatchServer looks at the server every
// serverLookEvery, and
//   - memory answers only while the last look that found the server is at
//     most serverFresh old: a server that stops answering (the primary is
//     down, the failover under way) stops it at once, and requests read
//     the database like any other (which answers 503 meanwhile);
//   - a look that finds another server (another postmaster, a restart of
//     the same, a standby) empties it;
//   - an answer is kept only if the statement that committed it, or read
//     it, says it ran on the server the last look found (serverIdentity, a
//     column of the key's finish and of its read): one on a connection
//     still open to an old primary is not.
//
// It holds at most two generations of memoryPerGeneration answers, each at
// most memoryFor after its completion: a client's retries come within
// seconds or minutes.
type memory struct {
	mu      sync.Mutex
	answers generations[Scope, Record]
	server  string    // the identity of the server the answers are from; "" none yet
	seenAt  time.Time // when a look last found it
}

const (
	memoryPerGeneration = 1 << 12
	memoryFor           = 10 * time.Minute
	serverLookEvery     = 100 * time.Millisecond
	serverFresh         = 3 * serverLookEvery
)

func newMemory() *memory { return &memory{answers: newGenerations[Scope, Record](memoryPerGeneration)} }

// serverSeen records a look that found the server identified by id at now:
// another server than the last one empties the memory.
func (m *memory) serverSeen(id string, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if id != m.server {
		m.server = id
		m.answers = newGenerations[Scope, Record](memoryPerGeneration)
	}
	m.seenAt = now
}

// serverLost records a look that found no server, or a standby: memory
// answers nothing until a look finds the server again.
func (m *memory) serverLost() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.seenAt = time.Time{}
}

// fresh reports whether the last look found the server at most
// serverFresh before now. m.mu is held.
func (m *memory) fresh(now time.Time) bool {
	return m.server != "" && !m.seenAt.IsZero() && now.Sub(m.seenAt) <= serverFresh
}

// keep remembers rec, a finished key's record whose answer was committed
// or read on the server identified by on.
func (m *memory) keep(rec Record, on string, now time.Time) {
	if rec.CompletedAt == nil || rec.Response == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if on == "" || on != m.server || !m.fresh(now) {
		return
	}
	m.answers.put(rec.Scope, rec)
}

// replay is the record to replay for a retry of scope carrying
// fingerprint, if memory may answer it: the server is fresh, the record
// completed at most memoryFor ago, and Decide says replay.
func (m *memory) replay(scope Scope, fingerprint []byte, now time.Time, ttl time.Duration) (Record, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.fresh(now) {
		return Record{}, false
	}
	rec, ok := m.answers.get(scope)
	if !ok || !now.Before(rec.CompletedAt.Add(memoryFor)) || rec.Decide(fingerprint, now, ttl) != DecideReplay {
		return Record{}, false
	}
	return rec, true
}

// serverIdentity is the SQL expression that tells one server from another:
// its address and its postmaster's start time (a promoted standby is
// another postmaster, and so is a restart); "" for a standby, whose
// answers memory must not keep.
const serverIdentity = `CASE WHEN pg_is_in_recovery() THEN ''
	ELSE concat_ws('/', inet_server_addr(), inet_server_port(), pg_postmaster_start_time()) END`

// WatchServer looks at the database server every serverLookEvery until ctx
// ends, so that the memory of answers answers only from the server that
// holds them (see memory). Without it running, memory answers nothing.
func (e *Engine) WatchServer(ctx context.Context) {
	t := time.NewTicker(serverLookEvery)
	defer t.Stop()
	for {
		e.lookAtServer(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// lookAtServer is one look of WatchServer.
func (e *Engine) lookAtServer(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, serverFresh)
	defer cancel()
	var id string
	if err := e.db.QueryRow(ctx, `SELECT `+serverIdentity).Scan(&id); err != nil || id == "" {
		e.memory.serverLost()
		return
	}
	e.memory.serverSeen(id, e.clock.Now())
}
