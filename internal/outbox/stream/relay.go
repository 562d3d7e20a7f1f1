package stream

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paymentsapi/paymentsapi/internal/backoff"
	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/outbox"
)

// Relay publishes the outbox from a Stream: each committed transaction's
// events, in commit order, confirmed once the publisher accepted them all.
// Run one in every instance: one reads at a time, holding an advisory lock
// on its replication connection from before it looks at the slot until its
// session ends (a slot alone would let another reader in while its creator
// catches up; Options.Exclusive), and the others wait their turn
// (Standby).
//
// Delivery is at least once: a relay that dies, or loses its connection,
// before it confirms leaves the slot where it was, and the next reader gets
// those transactions again.
//
// Order and parking: a payment's events are first published in the order
// they committed, by an outbox.Sender (waves, retries, parked events and
// their release, which the polling reader shares). Nothing after a failed
// publish is confirmed until it is accepted or parked.
//
// Position and catch-up. About once a second (PositionInterval) the relay
// records, in outbox_stream_positions, the commit time up to which it
// confirmed. When it has to create its slot (a first start, or a failover
// to a standby, where the slot did not follow), the stream will not carry
// what committed before the slot: the relay first publishes, from the
// table, the events created since CatchupMargin (5m) before that position, in
// insertion order, or, with no position recorded (the first start on a
// database, or the first after an upgrade from the polling relay of
// releases before migration 00033), every event that relay did not publish
// (published_at is null, not parked). What it publishes again there is
// the at-least-once of a failover.
//
// Tracing: each publish is a span continuing the trace its event was
// written under (outbox.StartPublishSpans), one per attempt.
type Relay struct {
	send       *outbox.Sender
	connString string
	db         *pgxpool.Pool
	clock      clock.Clock
	log        *slog.Logger
	cfg        RelayConfig

	saved      time.Time // when the position was last recorded
	stream     *Stream   // the stream being read, to report to while retrying
	onceStream *Stream   // RunOnce's session, kept open between calls
}

// endTimeout bounds the end of a session (see end).
const endTimeout = 5 * time.Second

// queryTimeout bounds each of the relay's statements (and the start of a
// session, before its stream opens), catchupTimeout the choice of a
// catch-up's events: a server that froze (a partition, a machine gone
// without a reset) must not hold the relay, which then starts over, on
// whichever server is the primary by then.
const (
	queryTimeout   = 10 * time.Second
	catchupTimeout = 5 * time.Minute
)

// take starts a session: it opens the stream Exclusive (one relay reads
// at a time: another, or another session of this one, gets ErrSlotBusy;
// the lock goes with the stream's connection), reads the parked
// aggregates, and lets the stream start (prepare). If the slot must be
// created, its catch-up is marked as under way first and the mark cleared
// once it is published: a slot found with the mark still set was left by a
// relay that died catching up, and is dropped and created again, so that
// its catch-up is never skipped; so is a slot the server invalidated,
// having removed WAL it still needed.
func (r *Relay) take(ctx context.Context) (*Stream, error) {
	r.stream = nil // a catch-up runs before the new stream exists: none to report to
	opts := r.cfg.Options
	opts.Exclusive, opts.Prepare = true, r.prepare
	s, err := Open(ctx, r.connString, opts)
	if err != nil {
		return nil, err
	}
	r.stream = s
	return s, nil
}

// prepare runs once the session holds the lock, before the stream looks at
// the slot (see take). Its statements are bounded: a server that froze
// must not hold the relay here.
func (r *Relay) prepare(ctx context.Context) error {
	qctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	var exists, lost, unfinished bool
	err := r.db.QueryRow(qctx, `
		SELECT EXISTS (SELECT FROM pg_replication_slots WHERE slot_name = $1 AND database = current_database()),
		       COALESCE((SELECT wal_status = 'lost' FROM pg_replication_slots WHERE slot_name = $1 AND database = current_database()), false),
		       COALESCE((SELECT catching_up FROM outbox_stream_positions WHERE slot = $1), false)`,
		r.cfg.Slot).Scan(&exists, &lost, &unfinished)
	if err != nil {
		return fmt.Errorf("outbox stream: look up slot %s: %w", r.cfg.Slot, err)
	}
	if exists && (unfinished || lost) {
		if lost {
			// The server removed WAL the slot still needed (it fell more
			// than max_slot_wal_keep_size behind): the slot can never be
			// read again. The position says where to catch up from.
			r.log.ErrorContext(ctx, "outbox stream: the server invalidated the slot (max_slot_wal_keep_size); creating it again and catching up from the recorded position",
				"slot", r.cfg.Slot)
		} else {
			r.log.WarnContext(ctx, "outbox stream: the slot's catch-up did not finish; creating the slot again", "slot", r.cfg.Slot)
		}
		if _, err := r.db.Exec(qctx, `SELECT pg_drop_replication_slot($1)`, r.cfg.Slot); err != nil {
			return fmt.Errorf("outbox stream: drop slot %s: %w", r.cfg.Slot, err)
		}
		exists = false
	}
	if !exists {
		if _, err := r.db.Exec(qctx, `
			INSERT INTO outbox_stream_positions (slot, updated_at, catching_up) VALUES ($1, $2, true)
			ON CONFLICT (slot) DO UPDATE SET catching_up = true, updated_at = EXCLUDED.updated_at`,
			r.cfg.Slot, r.clock.Now()); err != nil {
			return fmt.Errorf("outbox stream: mark the catch-up: %w", err)
		}
	}
	return r.send.Start(qctx, nil)
}

// end closes a session's stream, letting go of its lock. It waits at most
// endTimeout: a server that vanished without a reset would otherwise hold
// it until TCP gives up.
func end(ctx context.Context, s *Stream) {
	ctx, cancel := context.WithTimeout(ctx, endTimeout)
	defer cancel()
	_ = s.Close(ctx)
}

// RelayDeps are the collaborators of a Relay: the pool is the one it
// keeps its records with, one short statement at a time.
type RelayDeps = outbox.RelayDeps

// RelayConfig tunes a Relay. Zero fields take their defaults.
type RelayConfig struct {
	Options
	// BatchSize is how many events a batch gathers before it stops
	// waiting for more (default 100); it takes whole transactions, so one
	// may carry a few more.
	BatchSize int
	// Linger is how long a batch waits for more transactions once it has
	// one (default 20ms): fewer, larger publishes (and event-log writes),
	// for a few milliseconds of delay.
	Linger time.Duration
	// SendConfig tunes its publishes (Backoff and MaxBackoff space the
	// starts of its sessions after failures too).
	outbox.SendConfig
	// Standby is how often a relay whose slot is being read by another
	// tries again (default 5s).
	Standby time.Duration
	// PositionInterval is how often the position is recorded (default
	// 1s).
	PositionInterval time.Duration
	// AfterPublish, a failpoint for tests, runs once a batch was published
	// and before it is confirmed; an error ends the session there, as a
	// crash would.
	AfterPublish func(ctx context.Context, events []outbox.Event) error
}

// NewRelay returns a Relay.
func NewRelay(d RelayDeps, cfg RelayConfig) *Relay {
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 100
	}
	if cfg.Linger <= 0 {
		cfg.Linger = 20 * time.Millisecond
	}
	cfg.SendConfig = cfg.SendConfig.WithDefaults()
	if cfg.Standby <= 0 {
		cfg.Standby = 5 * time.Second
	}
	if cfg.PositionInterval <= 0 {
		cfg.PositionInterval = time.Second
	}
	log := d.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Slot == "" {
		cfg.Slot = DefaultSlot // Open reports a connection string it cannot parse
		if c, err := pgconn.ParseConfig(d.ConnString); err == nil {
			cfg.Slot = SlotFor(cmp.Or(c.Database, c.User)) // no database: the server takes the user's name
		}
	}
	r := &Relay{connString: d.ConnString, db: d.DB, clock: d.Clock, log: log, cfg: cfg}
	d.Log = log
	r.send = outbox.NewSender(d, cfg.SendConfig)
	// The stream is not read while a publish is retried: tell the server
	// we are alive, or after wal_sender_timeout it ends the connection
	// (and the batch is published again by the next session).
	r.send.Waiting = func() error {
		if r.stream == nil {
			return nil
		}
		return r.stream.sendStatus()
	}
	r.cfg.Catchup = r.catchUp
	return r
}

// Slot is the name of the replication slot the relay reads.
func (r *Relay) Slot() string { return r.cfg.Slot }

// Run reads and publishes until ctx ends, reconnecting after any failure.
func (r *Relay) Run(ctx context.Context) {
	outbox.Sessions{
		Backoff: backoff.Policy{Base: r.cfg.Backoff, Max: r.cfg.MaxBackoff}, Standby: r.cfg.Standby, Busy: ErrSlotBusy,
		Log: r.log, Interrupted: "outbox stream interrupted; reconnecting",
	}.Run(ctx, r.session)
}

// session opens the stream and publishes from it until an error; started
// runs once the stream is open.
func (r *Relay) session(ctx context.Context, started func()) error {
	s, err := r.take(ctx)
	if err != nil {
		return err
	}
	defer end(context.WithoutCancel(ctx), s)
	started()
	for {
		if r.send.ReleaseDue() {
			if err := r.send.Release(ctx); err != nil {
				return err
			}
		}
		var wait time.Duration // while events are parked, come back for releases
		if r.send.Holding() {
			wait = r.cfg.ReleaseInterval
		}
		if err := r.step(ctx, s, wait); err != nil {
			return err
		}
	}
}

// step publishes the next batch (waiting at most wait for it, if not 0)
// and confirms it.
func (r *Relay) step(ctx context.Context, s *Stream, wait time.Duration) error {
	batch, end, committed, err := r.batch(ctx, s, wait)
	if err != nil {
		return err
	}
	if len(batch) == 0 {
		if end != 0 { // replays of events cleaned up since: nothing to publish, but done with
			return s.Confirm(end)
		}
		return nil
	}
	if _, err := r.send.Send(ctx, batch); err != nil {
		return err
	}
	if r.cfg.AfterPublish != nil {
		if err := r.cfg.AfterPublish(ctx, batch); err != nil {
			return err
		}
	}
	if err := s.Confirm(end); err != nil {
		return err
	}
	r.record(ctx, committed)
	return nil
}

// RunOnce publishes what was committed before it was called (and what an
// operator released), then returns how many events the publisher accepted
// meanwhile, catch-up included. Its stream stays open for the next call:
// Close ends it. It is what tests and one-shot commands run; a server runs
// Run.
func (r *Relay) RunOnce(ctx context.Context) (published int, err error) {
	return r.send.Once(ctx, func() error { return r.once(ctx) }, r.Close)
}

// once is RunOnce's body.
func (r *Relay) once(ctx context.Context) error {
	// The end of a record written now: everything committed before the
	// call ends before it, and the server, once it has read that far,
	// says so. (pg_current_wal_insert_lsn would not do: at a page's start
	// it points past the page header, where no record the server reads
	// ends.) A non-transactional message the publication does not carry.
	var end pglogrepl.LSN // scans itself from the text
	qctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	if err := r.db.QueryRow(qctx, `SELECT pg_logical_emit_message(false, 'paymentsapi.outbox.runonce', '')::text`).Scan(&end); err != nil {
		return fmt.Errorf("outbox stream: mark the server's position: %w", err)
	}
	target := LSN(end)
	if r.onceStream == nil {
		s, err := r.take(ctx)
		if err != nil {
			return err
		}
		r.onceStream = s
	}
	s := r.onceStream
	if r.send.Holding() {
		if err := r.send.Release(ctx); err != nil {
			return err
		}
	}
	for !s.Drained(target) {
		before := s.read
		if err := s.AskPosition(); err != nil {
			return err
		}
		if err := r.step(ctx, s, 0); err != nil {
			return err
		}
		if s.read == before && !s.Drained(target) {
			// The server has not read further yet (the WAL is not flushed,
			// or it is decoding): ask again in a moment, not at once.
			if err := clock.Sleep(ctx, 5*time.Millisecond); err != nil {
				return err
			}
		}
	}
	return nil
}

// Close ends RunOnce's session, if one is open.
func (r *Relay) Close(ctx context.Context) {
	if r.onceStream != nil {
		end(ctx, r.onceStream)
		r.onceStream = nil
	}
}

// record writes the position at most once per PositionInterval. A failure
// is only logged: an older position costs more events published again
// after a failover, nothing else.
func (r *Relay) record(ctx context.Context, committed time.Time) {
	now := r.clock.Now()
	if now.Sub(r.saved) < r.cfg.PositionInterval {
		return
	}
	qctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	_, err := r.db.Exec(qctx, `
		INSERT INTO outbox_stream_positions (slot, committed_at, updated_at) VALUES ($1, $2, $3)
		ON CONFLICT (slot) DO UPDATE
		SET committed_at = GREATEST(outbox_stream_positions.committed_at, EXCLUDED.committed_at), updated_at = EXCLUDED.updated_at`,
		r.cfg.Slot, committed, now)
	if err != nil {
		r.log.WarnContext(ctx, "could not record the outbox stream's position", "error", err)
		return
	}
	r.saved = now
}

// CatchupMargin is how far before the recorded position a catch-up
// starts (see outbox.CatchupMargin, which clean-up keeps events for).
const CatchupMargin = outbox.CatchupMargin

// catchUpSQL chooses the events a new slot will not carry: those created
// since the margin before the position ($1's slot; $2 the margin, in
// microseconds), or, with no position (an upgrade from the polling relay),
// those it left unpublished. It reads the events since the margin through
// the event log's index, (tenant, created_at, id): one range of it per
// tenant, the tenants found by skipping from one to the next, so that the
// catch-up of a failover reads the minutes it needs, not the whole outbox,
// which is kept as long as the event log (TestACatchUpReadsOnlyTheMinutesItNeeds).
// Events without a tenant are in the index too, under NULL.
const catchUpSQL = `
	WITH RECURSIVE p AS (
	    SELECT committed_at - $2 * interval '1 microsecond' AS since FROM outbox_stream_positions WHERE slot = $1
	), tenants (t) AS (
	    (SELECT o.payload->>'tenantId' FROM outbox_events o
	     WHERE o.payload->>'tenantId' IS NOT NULL AND (SELECT since FROM p) IS NOT NULL
	     ORDER BY o.payload->>'tenantId' LIMIT 1)
	  UNION ALL
	    SELECT (SELECT o.payload->>'tenantId' FROM outbox_events o
	            WHERE o.payload->>'tenantId' > x.t ORDER BY o.payload->>'tenantId' LIMIT 1)
	    FROM tenants x WHERE x.t IS NOT NULL
	)
	SELECT id FROM (
	    SELECT o.id::text, o.seq FROM tenants x CROSS JOIN LATERAL (
	        SELECT o.id, o.seq FROM outbox_events o
	        WHERE o.payload->>'tenantId' = x.t AND o.created_at >= (SELECT since FROM p)
	        OFFSET 0) o -- a range of the index per tenant, not one join over the outbox
	  UNION ALL
	    SELECT o.id::text, o.seq FROM outbox_events o
	    WHERE o.payload->>'tenantId' IS NULL AND o.created_at >= (SELECT since FROM p)
	  UNION ALL
	    SELECT o.id::text, o.seq FROM outbox_events o
	    WHERE (SELECT since FROM p) IS NULL AND o.published_at IS NULL AND o.parked_at IS NULL
	) e
	ORDER BY seq`

// catchUpPlanning is the catch-up's transaction's planning: no sequential
// scans. catchUpSQL's ranges start at the position, which the planner does
// not know when it plans (a subquery's value), so it guesses a third of a
// tenant's events; for a tenant that has most of a large outbox, reading
// the whole table looked cheaper than that third through the index. Under
// make bench ARGS=-growth it read a 2.4 GB outbox twice (for its one
// tenant, and for the end of the tenant list), for the few minutes' events
// the catch-up needed, while new payments ran. The catch-up is built to
// read ranges of the index; only the branch for an outbox without a
// position (an upgrade from the polling relay) has no index to read, and
// scans the table still. That branch's disabled scan puts the plan's cost
// past any threshold, so JIT compilation is turned off too (a third of a
// second per catch-up, for a handful of events).
var catchUpPlanning = []string{"SET LOCAL enable_seqscan = off", "SET LOCAL jit = off"}

// chooseCatchUp returns the ids of the events a new slot of slot will not
// carry (catchUpSQL), read in tx under catchUpPlanning.
func chooseCatchUp(ctx context.Context, tx pgx.Tx, slot string) ([]string, error) {
	for _, s := range catchUpPlanning {
		if _, err := tx.Exec(ctx, s); err != nil {
			return nil, err
		}
	}
	rows, err := tx.Query(ctx, catchUpSQL, slot, CatchupMargin.Microseconds())
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// catchUp chooses what the new slot's stream will not carry (see Relay),
// as of snapshot, and returns the publishing of it, which the stream runs
// once the snapshot is let go (Options.Catchup). The snapshot only chooses
// the events, by id: they are published after its transaction ended, read
// again page by page (outbox rows never change), so that no transaction
// and no snapshot stays open across a publish.
func (r *Relay) catchUp(ctx context.Context, snapshot string) (func(context.Context) error, error) {
	var (
		ids []string
		at  time.Time // the snapshot's time: what committed before it is caught up
	)
	cctx, cancel := context.WithTimeout(ctx, catchupTimeout)
	defer cancel()
	err := pgx.BeginTxFunc(cctx, r.db, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(cctx, `SET TRANSACTION SNAPSHOT '`+snapshot+`'`); err != nil {
			return err
		}
		if err := tx.QueryRow(cctx, `SELECT statement_timestamp()`).Scan(&at); err != nil {
			return err
		}
		var err error
		ids, err = chooseCatchUp(cctx, tx, r.cfg.Slot)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("choose the events to catch up: %w", err)
	}
	return func(ctx context.Context) error {
		r.log.InfoContext(ctx, "outbox stream: a new slot; publishing what it will not carry", "slot", r.cfg.Slot, "events", len(ids))
		for len(ids) > 0 {
			page := ids[:min(len(ids), r.cfg.BatchSize)]
			ids = ids[len(page):]
			events, err := outbox.Load(ctx, r.db, page)
			if err != nil {
				return err
			}
			if _, err := r.send.Send(ctx, events); err != nil {
				return err
			}
		}
		// Transactions that committed between the slot's start and at are
		// in the stream, not published yet: the margin covers them.
		qctx, cancel := context.WithTimeout(ctx, queryTimeout)
		defer cancel()
		if _, err := r.db.Exec(qctx, `
			UPDATE outbox_stream_positions
			SET committed_at = GREATEST(committed_at, $2), updated_at = $3, catching_up = false
			WHERE slot = $1`, r.cfg.Slot, at, r.clock.Now()); err != nil {
			return fmt.Errorf("record the end of the catch-up: %w", err)
		}
		return nil
	}, nil
}

// batch waits for the next transaction (at most wait, if not 0: then it
// may return none), then takes those that come within Linger of it, up to
// BatchSize events; end is the last one's End, and committed its commit
// time.
func (r *Relay) batch(ctx context.Context, s *Stream, wait time.Duration) ([]outbox.Event, LSN, time.Time, error) {
	first := ctx
	if wait > 0 {
		var cancel context.CancelFunc
		first, cancel = context.WithTimeout(ctx, wait)
		defer cancel()
	}
	tx, err := s.Next(first)
	if err != nil {
		if ctx.Err() == nil && first.Err() != nil {
			return nil, 0, time.Time{}, nil // nothing came in time (the stream stays usable)
		}
		return nil, 0, time.Time{}, err
	}
	if len(tx.Events) == 0 && len(tx.Replays) == 0 {
		return nil, 0, time.Time{}, nil // the server's answer to AskPosition
	}
	events, end, committed := tx.Events, tx.End, tx.Committed
	if events, err = r.withReplays(ctx, events, tx.Replays); err != nil {
		return nil, 0, time.Time{}, err
	}
	more, cancel := context.WithTimeout(ctx, r.cfg.Linger)
	defer cancel()
	for len(events) < r.cfg.BatchSize {
		tx, err := s.Next(more)
		if err != nil {
			if ctx.Err() != nil {
				return nil, 0, time.Time{}, ctx.Err()
			}
			// Nothing more within Linger (a timed-out wait leaves the
			// stream usable), or the stream broke: what came before is
			// whole, and the next Next returns what broke it.
			break
		}
		if len(tx.Events) == 0 && len(tx.Replays) == 0 {
			break // the server's answer to AskPosition
		}
		if events, err = r.withReplays(ctx, append(events, tx.Events...), tx.Replays); err != nil {
			return nil, 0, time.Time{}, err
		}
		end, committed = tx.End, tx.Committed
	}
	return events, end, committed, nil
}

// withReplays appends to events those an operator asked to publish again
// (Replay), read from the table, in their order. One that is gone (cleaned
// up since) is logged and skipped: there is nothing left to publish.
func (r *Relay) withReplays(ctx context.Context, events []outbox.Event, ids []string) ([]outbox.Event, error) {
	if len(ids) == 0 {
		return events, nil
	}
	found, err := outbox.Load(ctx, r.db, ids)
	if err != nil {
		return nil, err
	}
	if len(found) < len(ids) {
		r.log.WarnContext(ctx, "outbox stream: events asked to be replayed are no longer in the outbox", "asked", len(ids), "found", len(found))
	}
	return append(events, found...), nil
}
