package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"github.com/paymentsapi/paymentsapi/internal/backoff"
	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/tracing"
)

// Sender is what both readers of the outbox (the stream of package
// outbox/stream and the poller of package outbox/poll) do with the events
// they read: publish them in order per aggregate, retry what fails, and
// park what keeps failing. A reader hands it events in the order they
// committed and moves on past them only once Send returned nil.
//
// Order: a batch is published in waves, the k-th wave holding the k-th
// event of each aggregate in the batch, and a wave only once every event of
// the one before it was accepted; within a wave no two events share an
// aggregate, so a failed event never lets a later one of its aggregate
// overtake it. A failed publish is retried with backoff until it is
// accepted or parked.
//
// Parking. An event whose publish failed MaxAttempts times for a reason of
// its own is parked: recorded in outbox_parked with its last error, and
// every later event of its aggregate is parked behind it (waits_for), so
// that the reader moves on and the aggregate's order holds. A broker outage
// (ErrBrokerUnavailable) is not the event's fault: it is retried without
// counting, however long it lasts, and parks nothing. Unpark releases an
// aggregate's parked events; Release then publishes them all, in order,
// and forgets them. Attempts are counted in memory: a reader that restarts
// counts an event's again from zero.
//
// Tracing: each publish is a span continuing the trace its event was
// written under (StartPublishSpans), one per attempt.
//
// A Sender is used by one goroutine at a time.
type Sender struct {
	db      DB
	pub     Publisher
	clock   clock.Clock
	log     *slog.Logger
	metrics *Metrics     // nil: none
	tracer  trace.Tracer // nil: tracing is off
	cfg     SendConfig

	checked  time.Time            // when released events were last looked for
	held     map[aggregate]string // aggregates with parked events, each with the event the rest wait behind
	attempts map[string]int       // failed publishes by event id, this session
	sent     int                  // events the publisher accepted, all sessions

	// Waiting, if set, runs before each wait between retries: a reader
	// whose server expects to hear from it meanwhile (the stream's) says
	// it is alive there. Its error ends the Send.
	Waiting func() error
}

// SendConfig tunes a Sender; the readers' configurations carry the same
// fields. Zero fields take their defaults.
type SendConfig struct {
	// PublishTimeout bounds one publish (a batch's, with a
	// BatchPublisher) (default 10s): a publisher that hangs is retried
	// like one that failed, rather than holding the reader.
	PublishTimeout time.Duration
	// Backoff and MaxBackoff space the retries of a failed publish
	// (defaults 100ms and 30s).
	Backoff, MaxBackoff time.Duration
	// MaxAttempts is how many publishes of an event may fail for a reason
	// of its own before it is parked (default 10).
	MaxAttempts int
	// ReleaseInterval is how often, while some events are parked, the
	// reader looks for those an operator released (default 1s).
	ReleaseInterval time.Duration
}

// RelayDeps are the collaborators of a reader of the outbox
// (stream.NewRelay, poll.NewRelay) and of its Sender.
type RelayDeps struct {
	// ConnString names the database, for the reader's own connection (the
	// stream's replication connection, the poller's session).
	ConnString string
	// DB is the pool the stream keeps its records with (and its Sender
	// parks with); the poller's Sender uses its session's connection.
	DB        *pgxpool.Pool
	Publisher Publisher
	Clock     clock.Clock
	Log       *slog.Logger // nil: discard
	Metrics   *Metrics     // nil: none
	// Tracer makes each publish a span continuing the trace its event was
	// created under; nil or a no-op provider traces nothing.
	Tracer trace.TracerProvider
}

// WithDefaults returns c with its zero fields set to their defaults.
func (c SendConfig) WithDefaults() SendConfig {
	if c.PublishTimeout <= 0 {
		c.PublishTimeout = 10 * time.Second
	}
	if c.Backoff <= 0 {
		c.Backoff = 100 * time.Millisecond
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = 30 * time.Second
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 10
	}
	if c.ReleaseInterval <= 0 {
		c.ReleaseInterval = time.Second
	}
	return c
}

// NewSender returns a Sender; Start it before each session of its reader.
func NewSender(d RelayDeps, cfg SendConfig) *Sender {
	log := d.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var db DB
	if d.DB != nil {
		db = d.DB
	}
	return &Sender{db: db, pub: d.Publisher, clock: d.Clock, log: log, metrics: d.Metrics,
		tracer: tracing.Tracer(d.Tracer), cfg: cfg.WithDefaults(), held: map[aggregate]string{}, attempts: map[string]int{}}
}

// Start begins a session of the reader on db (nil: the Sender's own):
// it reads the aggregates that have parked events, and forgets the
// attempts counted so far.
func (s *Sender) Start(ctx context.Context, db DB) error {
	if db != nil {
		s.db = db
	}
	held, err := loadHeld(ctx, s.db)
	if err != nil {
		return err
	}
	s.held, s.attempts = held, map[string]int{}
	return nil
}

// Sent is how many events the publisher accepted, in every session.
func (s *Sender) Sent() int { return s.sent }

// Once runs the body of a reader's RunOnce: it returns how many events
// the publisher accepted while body ran, and, if body failed, ends the
// reader's session (end), so that the next call starts a new one.
func (s *Sender) Once(ctx context.Context, body func() error, end func(context.Context)) (published int, err error) {
	before := s.sent
	if err := body(); err != nil {
		end(context.WithoutCancel(ctx))
		return s.sent - before, err
	}
	return s.sent - before, nil
}

// Holding reports whether some aggregates have parked events.
func (s *Sender) Holding() bool { return len(s.held) > 0 }

// ReleaseDue reports whether events are parked and ReleaseInterval has
// passed since Release last looked for released ones.
func (s *Sender) ReleaseDue() bool {
	return len(s.held) > 0 && s.clock.Now().Sub(s.checked) >= s.cfg.ReleaseInterval
}

// aggregate names the aggregate an event is about.
type aggregate struct{ typ, id string }

func aggregateOf(e Event) aggregate { return aggregate{e.AggregateType, e.AggregateID} }

// Send publishes events (in commit order) in waves (see Sender), retrying
// each failed event until it is accepted, parked, or ctx ends. It returns
// how many it parked. Only once it returned nil may the reader record that
// it is past them.
func (s *Sender) Send(ctx context.Context, events []Event) (parked int, err error) {
	for _, wave := range Waves(events) {
		n, err := s.sendWave(ctx, wave)
		parked += n
		if err != nil {
			return parked, err
		}
	}
	return parked, nil
}

func (s *Sender) sendWave(ctx context.Context, wave []Event) (parked int, err error) {
	todo := make([]Event, 0, len(wave))
	for _, e := range wave {
		if first, ok := s.held[aggregateOf(e)]; ok {
			if e.ID != first { // first itself, sent again, is parked already
				if err := s.park(ctx, e, 0, "", first); err != nil {
					return parked, err
				}
			}
			parked++
			continue
		}
		todo = append(todo, e)
	}
	policy := backoff.Policy{Base: s.cfg.Backoff, Max: s.cfg.MaxBackoff}
	for round := 1; len(todo) > 0; round++ {
		errs := s.publishAll(ctx, todo)
		now := s.clock.Now()
		var (
			failed []Event
			first  error
			outage bool
		)
		for i, err := range errs {
			e := todo[i]
			if err == nil {
				s.sent++
				s.metrics.CountPublished(now.Sub(e.OccurredAt))
				continue
			}
			if first == nil {
				first = err
			}
			if errors.Is(err, ErrBrokerUnavailable) {
				outage = true
			} else {
				s.metrics.CountFailure()
				s.attempts[e.ID]++
				if s.attempts[e.ID] >= s.cfg.MaxAttempts {
					if err := s.park(ctx, e, s.attempts[e.ID], err.Error(), ""); err != nil {
						return parked, err
					}
					parked++
					continue
				}
			}
			failed = append(failed, e)
		}
		s.metrics.SetBrokerUnavailable(outage)
		if len(failed) == 0 {
			return parked, nil
		}
		if ctx.Err() != nil {
			return parked, ctx.Err()
		}
		wait := policy.Delay(round)
		s.log.WarnContext(ctx, "outbox publish failed; retrying, and holding back the events after it",
			"events", len(failed), "event_id", failed[0].ID, "attempts", s.attempts[failed[0].ID], "wait", wait, "error", first)
		if s.Waiting != nil {
			if err := s.Waiting(); err != nil {
				return parked, err
			}
		}
		if err := clock.Sleep(ctx, wait); err != nil {
			return parked, err
		}
		todo = failed
	}
	return parked, nil
}

// publishAll publishes events, at once with a BatchPublisher, each under a
// span of its own when tracing is on (the publisher then gets a copy of
// the event carrying the span's traceparent).
func (s *Sender) publishAll(ctx context.Context, events []Event) (errs []error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.PublishTimeout)
	defer cancel()
	if s.tracer != nil {
		events = slices.Clone(events)
		spans := StartPublishSpans(s.tracer, events)
		defer func() { EndPublishSpans(spans, errs) }()
	}
	if bp, ok := s.pub.(BatchPublisher); ok && len(events) > 1 {
		return bp.PublishBatch(ctx, events)
	}
	errs = make([]error, len(events))
	for i, e := range events {
		errs[i] = s.pub.Publish(ctx, e)
	}
	return errs
}

// Waves splits events (in commit order) so that wave k holds the k-th
// event of each aggregate, in the order they came.
func Waves(events []Event) [][]Event {
	seen := make(map[aggregate]int, len(events))
	var out [][]Event
	for _, e := range events {
		k := aggregateOf(e)
		n := seen[k]
		seen[k] = n + 1
		if n == len(out) {
			out = append(out, nil)
		}
		out[n] = append(out[n], e)
	}
	return out
}

// queryTimeout bounds each of the Sender's statements: a server that froze
// (a partition, a machine gone without a reset) must not hold the reader,
// which then starts over.
const queryTimeout = 10 * time.Second

// EventColumns are the columns ScanEvent reads, in its order, for a
// statement that selects events from outbox_events.
const EventColumns = `id::text, aggregate_type, aggregate_id, event_type, payload, created_at, coalesce(traceparent, '')`

// ScanEvent reads an event selected as EventColumns, followed by more
// columns into extra.
func ScanEvent(row pgx.CollectableRow, extra ...any) (Event, error) {
	var e Event
	err := row.Scan(append([]any{&e.ID, &e.AggregateType, &e.AggregateID, &e.Type, (*[]byte)(&e.Payload), &e.OccurredAt, &e.TraceParent},
		extra...)...)
	e.OccurredAt = e.OccurredAt.UTC()
	return e, err
}

// Load reads the events ids, in their order in the outbox (those it still
// holds), for a reader that chose them by id.
func Load(ctx context.Context, db DB, ids []string) ([]Event, error) {
	ctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	rows, err := db.Query(ctx, `SELECT `+EventColumns+` FROM outbox_events WHERE id = ANY($1::uuid[]) ORDER BY seq`, ids)
	if err != nil {
		return nil, fmt.Errorf("outbox: read events: %w", err)
	}
	events, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Event, error) { return ScanEvent(row) })
	if err != nil {
		return nil, fmt.Errorf("outbox: read events: %w", err)
	}
	return events, nil
}
