// Package poll is the polling reader of the outbox: the textbook
// transactional outbox, for a PostgreSQL that cannot stream (13 or newer,
// any wal_level, a role with no REPLICATION attribute). It publishes every
// event at least once, a payment's events in the order they committed,
// and writes one position row per batch it publishes: nothing per event.
//
// # Order, and why no event is ever skipped
//
// Each event carries an order_xid (migration 00041, the column's default):
// the larger of its transaction's id and its insert statement's snapshot's
// xmax, which is above the id of every transaction that had ended when the
// statement began. The relay reads, in one statement and so in one
// snapshot, the events after its position in (order_xid, seq) order whose
// order_xid is below the snapshot's xmin (the oldest transaction still
// running then; the horizon), and records the last one it published as its
// position.
//
// No event is skipped: an event the snapshot does not see was written by a
// transaction running then or starting later, whose id is at or above the
// horizon, and an order_xid is never below its transaction's id; so it
// sorts after every event read. And every event below the horizon that
// will ever commit has: all transactions below the horizon have ended. A
// sequence (seq, or created_at) would not do: a transaction that took a
// lower number can commit after one that took a higher, and a reader that
// had moved past the higher would skip it.
//
// A payment's events go in their commit order: the transactions that
// write one payment's events are ordered by the payment's row lock, which
// the later one takes (its move, say) in a statement before its event's
// insert, so after the earlier one committed. The insert's statement began
// after that commit, so its xmax, and the later event's order_xid, is
// above the earlier transaction's id, and at least the earlier event's
// order_xid (an xmax of a statement that began before); where the two are
// equal, seq, taken at the inserts, orders them. The transaction id alone
// would not do: a transaction can take its id first and its payment's lock
// second. (A writer that took the lock in the insert's
// own statement would break this; the service's moves and inserts are
// separate statements.)
//
// The price of the horizon: a transaction that keeps an id open (anywhere
// on the server) holds publishing back until it ends. Nothing is lost,
// events are only late; paymentsapi_outbox_oldest_pending_age_seconds
// shows it.
//
// # Restarts and failovers
//
// A session is one connection, to one server: it holds an advisory lock
// there (one relay polls at a time; the others wait, Standby), reads the
// position there, and records it there. A restart starts from the
// recorded position: what was published but not recorded is published
// again (at least once). A promoted standby replayed the position with
// everything before it, and hands out ids above every one it replayed:
// above the position's, which is below the id of the transaction that
// recorded it. The session on the old primary ends with its connection;
// the next one reads the promoted standby's position, older by what the
// failover lost, and publishes from there. A database copied by dump and
// restore or by logical replication hands out ids below the copied ones:
// the relay refuses to read from a position above the server's ids, and
// says how to start again (ErrAheadOfServer).
//
// # Parked events, clean-up
//
// Publishing, retries and parking are outbox.Sender's, as for the stream.
// Clean-up (outbox.DeletePublished) keeps every event after the position.
package poll

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paymentsapi/paymentsapi/internal/backoff"
	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/outbox"
)

// ErrBusy is returned by a session when another relay holds the outbox.
var ErrBusy = errors.New("outbox poll: another relay is polling this database")

// ErrAheadOfServer is returned by a session whose recorded position is
// above every transaction id the server has handed out: the database was
// copied to another server (dump and restore, logical replication), whose
// new events would all sort before the position.
var ErrAheadOfServer = errors.New("outbox poll: the recorded position is ahead of the server's transaction ids")

// lockKey is the advisory lock a session holds (per database: advisory
// locks are).
const lockKey int64 = 0x6f7574626f78706f // "outboxpo"

// queryTimeout bounds each statement of a session, catchupTimeout the
// choice of a first start's events: a server that froze (a partition, a
// machine gone without a reset) must not hold the relay, which then starts
// over, on whichever server is the primary by then.
const (
	queryTimeout   = 10 * time.Second
	catchupTimeout = 5 * time.Minute
)

// Relay publishes the outbox by polling it (see the package doc). Run one
// in every instance: one polls at a time.
type Relay struct {
	connString string
	db         *pgxpool.Pool // nil: connString alone
	send       *outbox.Sender
	clock      clock.Clock
	log        *slog.Logger
	cfg        RelayConfig
	once       *session // RunOnce's session, kept open between calls
}

// RelayDeps are the collaborators of a Relay. A session holds a
// connection of its own, made as the pool's are (DB: its dialer and
// settings, not its tracer: a poll is not a span) or, without a pool, from
// ConnString; the Sender parks on it.
type RelayDeps = outbox.RelayDeps

// RelayConfig tunes a Relay. Zero fields take their defaults.
type RelayConfig struct {
	// BatchSize is how many events one poll reads at most (default 500).
	BatchSize int
	// Interval is how long the relay waits after a poll that did not fill
	// a batch (default 50ms): the delay an event may wait before it is
	// read, for one indexed read of the outbox's end per interval.
	Interval time.Duration
	// Standby is how often a relay that found another polling tries again
	// (default 5s).
	Standby time.Duration
	// SendConfig tunes its publishes (Backoff and MaxBackoff space the
	// starts of its sessions after failures too).
	outbox.SendConfig
	// AfterPublish, a failpoint for tests, runs once a batch was published
	// and before its position is recorded; an error ends the session
	// there, as a crash would.
	AfterPublish func(ctx context.Context, events []outbox.Event) error
}

// NewRelay returns a Relay.
func NewRelay(d RelayDeps, cfg RelayConfig) *Relay {
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 500
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 50 * time.Millisecond
	}
	if cfg.Standby <= 0 {
		cfg.Standby = 5 * time.Second
	}
	cfg.SendConfig = cfg.SendConfig.WithDefaults()
	log := d.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Relay{
		connString: d.ConnString, db: d.DB, clock: d.Clock, log: log, cfg: cfg,
		// The Sender's database is each session's connection (Start).
		send: outbox.NewSender(outbox.RelayDeps{Publisher: d.Publisher, Clock: d.Clock, Log: log, Metrics: d.Metrics, Tracer: d.Tracer}, cfg.SendConfig),
	}
}

// position is where the relay is: every event at or before
// (order_xid, seq), in that order, was published.
type position struct {
	xid uint64
	seq int64
}

func (p position) String() string { return fmt.Sprintf("%d/%d", p.xid, p.seq) }

// session is one connection to one server, holding the relay's lock there.
type session struct {
	conn *pgx.Conn
	pos  position
}

// Run polls and publishes until ctx ends, starting over after any
// failure.
func (r *Relay) Run(ctx context.Context) {
	outbox.Sessions{
		Backoff: backoff.Policy{Base: r.cfg.Backoff, Max: r.cfg.MaxBackoff}, Standby: r.cfg.Standby, Busy: ErrBusy,
		Log: r.log, Interrupted: "outbox poll interrupted; starting over",
	}.Run(ctx, r.run)
}

// run is one session of Run: it polls until an error; started runs once
// the session holds the outbox.
func (r *Relay) run(ctx context.Context, started func()) error {
	s, err := r.open(ctx)
	if err != nil {
		return err
	}
	defer s.close(context.WithoutCancel(ctx))
	started()
	for {
		if r.send.ReleaseDue() {
			if err := r.send.Release(ctx); err != nil {
				return err
			}
		}
		n, err := r.step(ctx, s)
		if err != nil {
			return err
		}
		if n < r.cfg.BatchSize {
			if err := clock.Sleep(ctx, r.cfg.Interval); err != nil {
				return err
			}
		}
	}
}

// RunOnce publishes what was committed before it was called (and what an
// operator released), then returns how many events the publisher accepted
// meanwhile, first catch-up included. It waits for the transactions that
// were running when it was called to end (see the package doc). Its
// session stays open for the next call: Close ends it. It is what tests
// and one-shot commands run; a server runs Run.
func (r *Relay) RunOnce(ctx context.Context) (published int, err error) {
	return r.send.Once(ctx, func() error { return r.runOnce(ctx) }, r.Close)
}

// runOnce is RunOnce's body.
func (r *Relay) runOnce(ctx context.Context) error {
	if r.once == nil {
		s, err := r.open(ctx)
		if err != nil {
			return err
		}
		r.once = s
	}
	s := r.once
	// Every transaction that ended before now has an id below the next
	// one the server hands out.
	target, err := s.xids(ctx, `pg_snapshot_xmax(pg_current_snapshot())`)
	if err != nil {
		return err
	}
	if r.send.Holding() {
		if err := r.send.Release(ctx); err != nil {
			return err
		}
	}
	for {
		horizon, err := s.xids(ctx, `pg_snapshot_xmin(pg_current_snapshot())`)
		if err != nil {
			return err
		}
		n, err := r.step(ctx, s)
		if err != nil {
			return err
		}
		if n == 0 && horizon >= target {
			return nil // everything below target is behind the position
		}
		if n == 0 {
			// A transaction older than the call is still running: look
			// again in a moment, not at once.
			if err := clock.Sleep(ctx, 5*time.Millisecond); err != nil {
				return err
			}
		}
	}
}

// Close ends RunOnce's session, if one is open.
func (r *Relay) Close(ctx context.Context) {
	if r.once != nil {
		r.once.close(ctx)
		r.once = nil
	}
}

// open starts a session: it connects, takes the lock (ErrBusy if another
// relay holds it), reads the parked events and the position, and, the
// first time on a database, publishes what no reader will have published
// (catchUp).
func (r *Relay) open(ctx context.Context) (_ *session, err error) {
	var cfg *pgx.ConnConfig
	if r.db != nil {
		cfg = r.db.Config().ConnConfig.Copy()
		cfg.Tracer = nil
	} else if cfg, err = pgx.ParseConfig(r.connString); err != nil {
		return nil, fmt.Errorf("outbox poll: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(cctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("outbox poll: connect: %w", err)
	}
	s := &session{conn: conn}
	defer func() {
		if err != nil {
			s.close(context.WithoutCancel(ctx))
		}
	}()
	var locked bool
	if err := conn.QueryRow(cctx, `SELECT pg_try_advisory_lock($1)`, lockKey).Scan(&locked); err != nil {
		return nil, fmt.Errorf("outbox poll: take the lock: %w", err)
	}
	if !locked {
		return nil, ErrBusy
	}
	if err := r.send.Start(cctx, conn); err != nil {
		return nil, err
	}
	var (
		xid   string
		found = true
		next  uint64
	)
	err = conn.QueryRow(cctx, `SELECT order_xid::text, seq FROM outbox_poll_position`).Scan(&xid, &s.pos.seq)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		found = false
	case err != nil:
		return nil, fmt.Errorf("outbox poll: read the position: %w", err)
	}
	if !found {
		if s.pos, err = r.catchUp(ctx, conn); err != nil {
			return nil, err
		}
		return s, nil
	}
	if s.pos.xid, err = strconv.ParseUint(xid, 10, 64); err != nil {
		return nil, fmt.Errorf("outbox poll: read the position: %w", err)
	}
	if next, err = s.xids(ctx, `pg_snapshot_xmax(pg_current_snapshot())`); err != nil {
		return nil, err
	}
	if s.pos.xid >= next {
		r.log.ErrorContext(ctx, "outbox poll: the recorded position is above every transaction id of this server, so every new event would sort before it: "+
			"the database was copied to a new server; publish from a point you choose by deleting the row of outbox_poll_position (its first start then catches up as on a new database)",
			"position", s.pos.String(), "next_xid", next)
		return nil, ErrAheadOfServer
	}
	return s, nil
}

func (s *session) close(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	// The lock goes with the connection, but only once the server has
	// ended its session, a moment after the close: let it go first, so
	// that a relay starting now does not find it taken.
	_, _ = s.conn.Exec(ctx, `SELECT pg_advisory_unlock($1)`, lockKey)
	_ = s.conn.Close(ctx)
}

// xids reads one transaction id the server computes (expr, an xid8).
func (s *session) xids(ctx context.Context, expr string) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	var v string
	if err := s.conn.QueryRow(ctx, `SELECT (`+expr+`)::text`).Scan(&v); err != nil {
		return 0, fmt.Errorf("outbox poll: read the server's transaction ids: %w", err)
	}
	return strconv.ParseUint(v, 10, 64)
}

// pollSQL reads up to $3 events after the position ($1, $2) in
// (order_xid, seq) order, below the snapshot's xmin: the order_xid index
// from the position on, the end of the outbox whatever its size.
const pollSQL = `
	SELECT ` + outbox.EventColumns + `, e.order_xid::text AS position_xid, e.seq FROM outbox_events e
	WHERE e.order_xid >= $1::text::xid8 AND e.order_xid < pg_snapshot_xmin(pg_current_snapshot())
	  AND (e.order_xid, e.seq) > ($1::text::xid8, $2)
	ORDER BY e.order_xid, e.seq -- the column's, not the text of it
	LIMIT $3`

// step reads a batch (pollSQL), publishes it, and records the position
// after it. It returns how many events it read.
func (r *Relay) step(ctx context.Context, s *session) (int, error) {
	events, last, err := r.poll(ctx, s)
	if err != nil || len(events) == 0 {
		return 0, err
	}
	if _, err := r.send.Send(ctx, events); err != nil {
		return 0, err
	}
	if r.cfg.AfterPublish != nil {
		if err := r.cfg.AfterPublish(ctx, events); err != nil {
			return 0, err
		}
	}
	if err := s.record(ctx, last, r.clock.Now()); err != nil {
		return 0, err
	}
	return len(events), nil
}

// poll runs pollSQL from s's position, and returns the events and the
// position of the last.
func (r *Relay) poll(ctx context.Context, s *session) ([]outbox.Event, position, error) {
	ctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	rows, err := s.conn.Query(ctx, pollSQL, strconv.FormatUint(s.pos.xid, 10), s.pos.seq, r.cfg.BatchSize)
	if err != nil {
		return nil, position{}, fmt.Errorf("outbox poll: read events: %w", err)
	}
	var last position
	events, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (outbox.Event, error) {
		var xid string
		e, err := outbox.ScanEvent(row, &xid, &last.seq)
		if err == nil {
			last.xid, err = strconv.ParseUint(xid, 10, 64)
		}
		return e, err
	})
	if err != nil {
		return nil, position{}, fmt.Errorf("outbox poll: read events: %w", err)
	}
	return events, last, nil
}

// record writes the position after a published batch. It never moves
// back; on the session's server, where the events were read.
func (s *session) record(ctx context.Context, p position, now time.Time) error {
	ctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	if _, err := s.conn.Exec(ctx, `
		UPDATE outbox_poll_position SET order_xid = $1::text::xid8, seq = $2, updated_at = $3
		WHERE (order_xid, seq) < ($1::text::xid8, $2)`, strconv.FormatUint(p.xid, 10), p.seq, now); err != nil {
		return fmt.Errorf("outbox poll: record the position: %w", err)
	}
	s.pos = p
	return nil
}
