package outbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/paymentsapi/paymentsapi/internal/backoff"
	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/ids"
	"github.com/paymentsapi/paymentsapi/internal/tracing"
)

// DB is what the relay and the metrics need of the database; *pgxpool.Pool
// has it. It has no Begin: each call is one transaction of its own (a batch
// one implicit transaction), so the calls a pass makes are its commits.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// DefaultRelayInterval is how often a Relay started with it looks for due
// rows while there are none; while passes find work, Run goes on at once.
const DefaultRelayInterval = time.Second

// RelayConfig tunes a Relay. Zero fields take their defaults.
type RelayConfig struct {
	// BatchSize is how many rows one pass claims at most (default 100).
	BatchSize int
	// Lease is how long a claim holds its rows (default 30s). A relay that
	// dies holding a claim delays its rows by at most this long; then
	// another relay publishes them again.
	Lease time.Duration
	// PublishTimeout bounds one publish (default 10s). It must be shorter
	// than Lease: a publish is only started while the claim has at least
	// this long left by the relay's clock, so that no row is published by
	// two relays at once unless one of them stalled past its lease or
	// their clocks disagree by more than Lease - PublishTimeout.
	PublishTimeout time.Duration
	// MaxAttempts is how many publishes of a row are started before it is
	// parked (default 10). Only failures of the row count: a publish that
	// failed because the broker was unavailable, or that shutdown
	// interrupted, is handed back uncounted, and so is a row its pass did
	// not get to. A relay that dies holding a claim counts one attempt on
	// every row of it, once (see Relay, Crash isolation).
	MaxAttempts int
	// Backoff is the wait after the first failed attempt; it doubles with
	// each attempt, up to MaxBackoff, with jitter (defaults 1s and 5m).
	Backoff    time.Duration
	MaxBackoff time.Duration
	// OutageBackoff is how long the relay pauses after a publish failed with
	// ErrBrokerUnavailable; it doubles with each failed probe, up to
	// MaxOutageBackoff, with jitter, and starts over after a success
	// (defaults 1s and 30s).
	OutageBackoff    time.Duration
	MaxOutageBackoff time.Duration
	// Hooks are failpoints for tests; the zero value does nothing.
	Hooks RelayHooks
}

// RelayHooks are failpoints of the relay, for tests that prove recovery.
type RelayHooks struct {
	// AfterPublish runs after e was published, before the pass publishes
	// its next row (with a BatchPublisher, the rest of the batch was
	// published with e) and before the end of the pass marks e and the rows
	// published before it. An error stops RunOnce right there, as a crash
	// would: nothing more is written, so e and every row the pass
	// published before it stay unmarked, every row of the claim keeps the
	// attempt the claim counted, and the claim holds until its lease runs
	// out; then its rows are claimed again as suspects, and the published
	// ones are published again.
	AfterPublish func(ctx context.Context, e Event) error
}

func (c RelayConfig) withDefaults() RelayConfig {
	if c.BatchSize <= 0 {
		c.BatchSize = 100
	}
	if c.Lease <= 0 {
		c.Lease = 30 * time.Second
	}
	if c.PublishTimeout <= 0 {
		c.PublishTimeout = min(10*time.Second, c.Lease/3)
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 10
	}
	if c.Backoff <= 0 {
		c.Backoff = time.Second
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = 5 * time.Minute
	}
	if c.OutageBackoff <= 0 {
		c.OutageBackoff = time.Second
	}
	if c.MaxOutageBackoff <= 0 {
		c.MaxOutageBackoff = 30 * time.Second
	}
	return c
}

// delay is the wait after the n-th failed attempt (n >= 1).
func (c RelayConfig) delay(n int) time.Duration {
	return backoff.Policy{Base: c.Backoff, Max: c.MaxBackoff}.Delay(n)
}

// RelayDeps are the collaborators of a Relay.
type RelayDeps struct {
	DB        DB
	Publisher Publisher
	Clock     clock.Clock
	Log       *slog.Logger
	// Metrics counts what the relay does; nil counts nothing.
	Metrics *Metrics
	// Tracer makes each publish a span continuing the trace its event was
	// created under (tracing.Active); nil or a no-op provider traces
	// nothing.
	Tracer trace.TracerProvider
}

// Relay publishes the outbox: it claims unpublished rows, publishes them
// with the event id as the message id, and marks them published. Run one in
// every API instance; any number can run at once.
//
// Commits. A pass commits twice, whatever its batch size: the claim, and
// one statement at its end that marks the rows it published and hands back
// the rows it did not start (see book). Other writes are for rare paths
// only: a failed publish is booked on its row at once, a row whose attempts
// ran out is parked, and a pass that claimed a suspect hands the rest of its
// batch back before publishing it.
//
// Claims. A pass claims a batch with FOR UPDATE SKIP LOCKED in one short
// statement that sets a lease (claimed_until) and a claim token on the rows
// and counts an attempt on each: the claim is the start of the batch's
// publishes. No transaction is open while it publishes. A row whose lease
// ran out (its relay died or stalled) is claimed again.
//
// Delivery is at least once. A crash between a publish and the end of the
// pass publishes the event again (and every event the pass had published
// before it), so consumers deduplicate by event id (the NATS publisher also
// sets Nats-Msg-Id, so the broker drops a repeat within its window).
//
// Lost claims. A pass does not check before each publish that it still
// holds the row's claim (that cost a commit per event). It only never
// starts a publish once its own clock says its claim has less than
// PublishTimeout left, and hands the rest back. So two relays publish the
// same row only if one stalled past its lease or their clocks disagree by
// more than Lease - PublishTimeout; the consumers' deduplication covers
// that, as it covers a crash. What a relay books after losing its claim
// cannot undo the new owner's: a hand-back or a failure booking only
// touches rows that still carry its claim token, and a mark only rows not
// yet published, so the first mark stands (one that comes before the new
// owner's ends its claim, with the row published: it was).
//
// Failures. A failed publish is retried with exponential backoff and jitter;
// after MaxAttempts the row is parked: kept, with its last error, counted by
// the metrics, never dropped. The claim counts the attempt, and the pass
// takes the count back on every row it hands back, so attempts counts the
// publishes started, plus, for a relay that died holding a claim, one on
// every row of it that it had not started: a row whose publishes kept being
// cut short (a relay that died on it each time) is parked when its next
// claim would exceed MaxAttempts, with no publish and the claim's count
// taken back. Unpark and UnparkAll (the
// command `paymentsapi outbox unpark`) send parked rows round again.
//
// Crash isolation. A relay that dies mid-pass leaves every row of its claim
// counted, the ones it never started included. Such a row, claimed again
// with the dead claim's token still on it, is a suspect: the relay may have
// died publishing it. A pass that claims a suspect it will publish hands
// every other row back at once, uncounted (suspects stay suspects), and
// publishes that one alone; so a row that crashes relays again and again
// costs its batch-mates one attempt, for the first crash, and is parked by
// itself. Parking a row whose attempts ran out needs no isolation (nothing
// is published), so the rest of its batch goes on after it.
//
// Broker outages. A publish error wrapping ErrBrokerUnavailable is the
// broker's fault, not the row's: the pass stops, hands its row and the rest
// of its batch back with no attempt counted (with a BatchPublisher, which
// was sent every event of the pass at once, only the rows the broker could
// not take go back; each other result is booked on its row), and the relay
// pauses (RunOnce claims nothing) for OutageBackoff, doubling up to
// MaxOutageBackoff while the probes keep failing, until a publish succeeds. An outage of any length
// therefore parks nothing; it is logged once when it starts and once when it
// ends, and shows in the metrics as paymentsapi_outbox_broker_unavailable and
// a growing oldest-pending age.
//
// Ordering, per payment (per aggregate). The relay never publishes an event
// while an earlier event of the same aggregate (by seq, the insertion
// order) is unpublished, parked ones included: a payment's events are first
// published in the order they happened, each only after the broker
// acknowledged the one before, and a parked PaymentCreated holds back its
// PaymentSucceeded (both stay visible: one parked, one pending, and the
// pending age grows) until it is unparked. The claim takes only heads, at
// most one event per aggregate, and the next event of an aggregate becomes
// a head only when the mark of the one before commits, so marking at the
// end of the pass keeps this order. Events waiting like this cost the claim
// nothing: it reads only each aggregate's head (see claimSQL), however many
// events wait behind a parked one. What is not promised: a repeat. A
// republished event (after a crash before the mark, or a relay that stalled
// past its lease) may arrive after later events of its payment, and brokers
// redeliver unacknowledged messages out of order. Consumers must therefore
// be idempotent by event id and must not rely on order; the ledger only acts
// on PaymentSucceeded and keys its entry by payment, so order does not
// matter to it. Events of different payments have no order.
type Relay struct {
	db      DB
	pub     Publisher
	clock   clock.Clock
	log     *slog.Logger
	metrics *Metrics
	cfg     RelayConfig
	tracer  trace.Tracer // nil: tracing is off

	outage outage
}

// outage is the relay's view of the broker: up (since is zero), or down
// since some time, with the passes paused until resume.
type outage struct {
	mu     sync.Mutex
	since  time.Time
	probes int // failed publishes since the outage began
	resume time.Time
}

// NewRelay returns a Relay. It fails if cfg is inconsistent.
func NewRelay(d RelayDeps, cfg RelayConfig) (*Relay, error) {
	cfg = cfg.withDefaults()
	if cfg.PublishTimeout >= cfg.Lease {
		return nil, fmt.Errorf("outbox relay: publish timeout (%s) must be shorter than the claim lease (%s)", cfg.PublishTimeout, cfg.Lease)
	}
	if d.DB == nil || d.Publisher == nil || d.Clock == nil {
		return nil, errors.New("outbox relay: DB, Publisher and Clock are required")
	}
	log := d.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Relay{db: d.DB, pub: d.Publisher, clock: d.Clock, log: log, metrics: d.Metrics, cfg: cfg, tracer: tracing.Tracer(d.Tracer)}, nil
}

// claimedRow is an outbox row held by this pass's claim.
type claimedRow struct {
	event    Event
	seq      int64
	attempts int // publishes started so far, this pass's included: the claim counted it
	// suspect: an earlier claim of the row ran out without an outcome, so a
	// relay may have died publishing it (see Relay, Crash isolation).
	suspect bool
}

// RunOnce claims one batch of due rows, publishes them (one by one, or in
// one call to a BatchPublisher), and marks them published together at the
// end of the pass. It returns how many
// it published and booked so. Failed publishes are booked on their rows
// (backoff, or parked) and are not errors of RunOnce. An error wrapping
// ErrBrokerUnavailable means the broker is down: the pass stopped, or did
// not start because the relay is pausing, and no attempt was counted. Any
// other error means the database failed, ctx ended, or a hook said stop.
// Whenever the pass stops early, the rows it had not started are handed
// back at once, uncounted (except after a hook's stop, which writes
// nothing, as a crash would).
func (r *Relay) RunOnce(ctx context.Context) (published int, err error) {
	published, _, err = r.runOnce(ctx)
	return published, err
}

// claimTimeout bounds the claim, one statement on the primary.
const claimTimeout = 10 * time.Second

// markTimeout bounds the writes that book what happened to a row; they run
// even while shutting down.
const markTimeout = 5 * time.Second

// pass is what one pass has done with its claim so far.
type pass struct {
	token string
	until time.Time // the claim's lease, by this relay's clock
	// done are the rows the broker acknowledged, to be marked published.
	done []claimedRow
	// back are the rows whose publish the pass did not start (or started
	// and cut short for a reason not the row's), to be handed back with
	// the claim's count taken back.
	back []claimedRow
	// crashed: a hook said stop; write nothing more, as a crash would.
	crashed bool
}

func (r *Relay) runOnce(ctx context.Context) (published, claimed int, err error) {
	now := r.clock.Now()
	if resume, paused := r.paused(now); paused {
		return 0, 0, fmt.Errorf("outbox relay pausing until %s: %w", resume.Format(time.RFC3339), ErrBrokerUnavailable)
	}
	p := &pass{
		token: ids.NewEventID(now), // any unique value; a UUIDv7 is at hand
		until: now.Add(r.cfg.Lease),
	}
	rows, err := r.claim(ctx, now, p.until, p.token)
	if err != nil {
		return 0, 0, err
	}
	err = r.publishAll(ctx, p, rows)
	if p.crashed {
		return 0, len(rows), err
	}
	if bookErr := r.book(ctx, p); bookErr != nil {
		if err == nil {
			return 0, len(rows), bookErr
		}
		// The pass already stopped for err, which is what RunOnce reports;
		// the rows it booked nothing on wait for their lease.
		r.log.WarnContext(ctx, "could not book the outbox pass; its claim will run out", "error", bookErr, "rows", len(rows))
		return 0, len(rows), err
	}
	return len(p.done), len(rows), err
}

// publishAll publishes the claimed rows, in seq order, recording in p what
// the end of the pass must book. It parks the rows whose attempts ran out
// first, and if the claim holds a suspect it will publish, it publishes that
// one alone. It returns why it stopped early, if it did.
func (r *Relay) publishAll(ctx context.Context, p *pass, rows []claimedRow) error {
	todo := make([]claimedRow, 0, len(rows))
	for i, row := range rows {
		if row.attempts <= r.cfg.MaxAttempts {
			todo = append(todo, row)
			continue
		}
		// Its publishes were started as often as allowed, and the relays
		// that started them died before booking the outcome. Park it
		// rather than loop; the claim's count is taken back, as no publish
		// starts. It needs no isolation: nothing of it is published.
		row.attempts--
		err := r.fail(ctx, row, p.token, fmt.Errorf("gave up: %d attempts ran out without an outcome", row.attempts), true, true)
		if err != nil {
			p.back = append(append(p.back, todo...), rows[i+1:]...)
			return err
		}
	}
	if i := slices.IndexFunc(todo, func(c claimedRow) bool { return c.suspect }); i >= 0 && len(todo) > 1 {
		// A relay may have died publishing this row, and may die on it
		// again: the claim has counted an attempt on every row beside it.
		// Publish it alone, and hand the others back at once, so that a row
		// that crashes relays again and again is parked by itself instead
		// of taking its batch-mates to MaxAttempts with it.
		suspect := todo[i]
		others := slices.Delete(slices.Clone(todo), i, i+1)
		if err := r.isolate(ctx, others, p.token); err != nil {
			p.back = append(p.back, todo...)
			return err
		}
		todo = []claimedRow{suspect}
	}
	if bp, ok := r.pub.(BatchPublisher); ok && len(todo) > 1 {
		return r.publishBatch(ctx, bp, p, todo)
	}
	for i := range todo {
		if !r.mayStart(ctx, p) {
			// Shutting down, or the claim is too short for one more
			// publish: hand the rest back rather than risk a second relay
			// publishing them at the same time.
			p.back = append(p.back, todo[i:]...)
			return ctx.Err()
		}
		pctx, cancel := context.WithTimeout(ctx, r.cfg.PublishTimeout)
		spans := r.startSpans(todo[i : i+1])
		if spans != nil {
			pctx = trace.ContextWithSpan(pctx, spans[0])
		}
		pubErr := r.pub.Publish(pctx, todo[i].event)
		cancel()
		endSpans(spans, []error{pubErr})
		if stop, err := r.bookSent(ctx, p, todo[i:i+1], []error{pubErr}); stop {
			// The rows after it were not started: hand them back.
			p.back = append(p.back, todo[i+1:]...)
			return err
		}
	}
	return nil
}

// mayStart reports whether the pass may start a publish now: not while
// shutting down, nor once its claim has less than PublishTimeout left.
func (r *Relay) mayStart(ctx context.Context, p *pass) bool {
	return ctx.Err() == nil && !r.clock.Now().Add(r.cfg.PublishTimeout).After(p.until)
}

// publishBatch publishes todo with one PublishBatch call, one publish start
// bounded by PublishTimeout like any other. Every event of the batch was
// sent, so each result is booked on its own row (bookSent).
func (r *Relay) publishBatch(ctx context.Context, bp BatchPublisher, p *pass, todo []claimedRow) error {
	if !r.mayStart(ctx, p) {
		p.back = append(p.back, todo...)
		return ctx.Err()
	}
	spans := r.startSpans(todo)
	events := make([]Event, len(todo))
	for i, row := range todo {
		events[i] = row.event
	}
	pctx, cancel := context.WithTimeout(ctx, r.cfg.PublishTimeout)
	errs := bp.PublishBatch(pctx, events)
	cancel()
	endSpans(spans, errs)
	if len(errs) != len(todo) {
		// A defect of the publisher: nothing says which events it took.
		// Booked as an outage on every row, so that the relay backs off
		// instead of sending the batch again every pass; whatever it did
		// publish goes out again.
		defect := fmt.Errorf("%w: the publisher answered %d results for a batch of %d events", ErrBrokerUnavailable, len(errs), len(todo))
		errs = slices.Repeat([]error{defect}, len(todo))
	}
	_, err := r.bookSent(ctx, p, todo, errs)
	return err
}

// startSpans starts the publish span of each row's event, a child of the
// trace context the event was created under (a root for an untraced
// event), and gives the event the span's own traceparent: the broker's
// message and the event log then carry the publish, and whatever follows
// (the ledger, webhook deliveries) continues the trace under it. It returns
// nil when tracing is off.
func (r *Relay) startSpans(rows []claimedRow) []trace.Span {
	if r.tracer == nil {
		return nil
	}
	spans := make([]trace.Span, len(rows))
	for i := range rows {
		e := &rows[i].event
		ctx, span := r.tracer.Start(tracing.WithTraceParent(context.Background(), e.TraceParent), "publish "+e.Type,
			trace.WithSpanKind(trace.SpanKindProducer),
			trace.WithAttributes(attribute.String("messaging.operation.type", "send"),
				attribute.String("messaging.message.id", e.ID), attribute.String("paymentsapi.event.type", e.Type),
				attribute.String("paymentsapi.aggregate.id", e.AggregateID)))
		spans[i] = span
		e.TraceParent = tracing.TraceParent(ctx)
	}
	return spans
}

// endSpans ends the publish spans with their results (nothing when spans
// is nil); a result missing from errs (a defective publisher) counts as a
// failure.
func endSpans(spans []trace.Span, errs []error) {
	for i, span := range spans {
		err := errors.New("no result from the publisher")
		if i < len(errs) {
			err = errs[i]
		}
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, "publish failed")
		}
		span.End()
	}
}

// bookSent books the results of publishes the pass started, errs[i] the
// result of sent[i], each on its own row, whatever the others': an
// accepted row is marked at the end of the pass (never handed back); a row
// that failed through its own fault backs off, its attempt counted; a row
// the broker could not take, or whose answer shutdown cut short, is handed
// back uncounted. If booking a failure fails (the database), the failed
// rows after it are left to their lease, their attempts counted, as a
// crash leaves them. Then the relay pauses if any row met an outage. stop
// says that the pass must go no further (with err, nil after a clean
// stop): a hook said stop (write nothing more), the database failed,
// shutdown, or an outage.
func (r *Relay) bookSent(ctx context.Context, p *pass, sent []claimedRow, errs []error) (stop bool, err error) {
	var (
		outage, bookErr error
		accepted        bool
	)
	for i, row := range sent {
		switch pubErr := errs[i]; {
		case pubErr == nil:
			accepted = true
			if h := r.cfg.Hooks.AfterPublish; h != nil {
				if outage == nil {
					r.brokerUp(ctx)
				}
				if err := h(ctx, row.event); err != nil {
					p.crashed = true
					return true, fmt.Errorf("outbox relay stopped after publishing event %s: %w", row.event.ID, err)
				}
			}
			p.done = append(p.done, row)
		case ctx.Err() != nil:
			p.back = append(p.back, row) // it may even have been published; not the row's fault
		case errors.Is(pubErr, ErrBrokerUnavailable):
			p.back = append(p.back, row)
			if outage == nil {
				outage = pubErr
			}
		case bookErr != nil:
			// Left to its lease, as a crash would leave it.
		default:
			bookErr = r.fail(ctx, row, p.token, pubErr, row.attempts >= r.cfg.MaxAttempts, false)
		}
	}
	switch {
	case outage != nil:
		r.brokerDown(ctx, outage)
	case accepted:
		r.brokerUp(ctx)
	}
	switch {
	case bookErr != nil:
		return true, bookErr
	case ctx.Err() != nil:
		return true, ctx.Err()
	case outage != nil:
		return true, fmt.Errorf("outbox relay stopped its pass: %w", outage)
	}
	return false, nil
}

// claimSQL claims up to $2 due rows for the lease $3 under the token $4, and
// counts an attempt on each: the claim is the start of the pass's publishes
// (see Relay). Each row comes back with whether it is a suspect: its
// previous claim ran out without an outcome (claim_token still set), so a
// relay may have died publishing it.
//
// The rows are taken in the order they are due, then in insertion order,
// from the partial index outbox_events_due_head_idx (next_attempt_at, seq),
// which holds only heads: rows that are (or may be) the earliest unpublished
// event of their aggregate (the column head, kept by triggers, see
// migrations/00011_ops_outbox_heads.sql). The scan stops at the first row
// not due yet, so rows waiting for a backoff cost nothing, and rows waiting
// behind an earlier unpublished event of their aggregate (parked, backing
// off or claimed) are not in the index at all, so they cost nothing either,
// however many there are. The min(seq) subquery is the ordering rule
// itself, and does not trust the flag: a row is only due once it is the
// earliest unpublished event of its aggregate, so a claim holds at most one
// row per aggregate. It is a scalar subquery, not a NOT EXISTS, on purpose:
// the planner may turn a NOT EXISTS into an anti join, and did, on
// statistics taken while the relay kept up (almost no row unpublished), as
// a nested loop that walked every unpublished row for each candidate (9
// million rows for a backlog of 3,000; TestClaimStaysCheapOnStaleStatistics).
// A scalar subquery is always run per candidate, as one probe of
// outbox_events_unpublished_aggregate_idx.
// The claimed ids, and the suspects among them, are looked up again by
// primary key (= ANY of an array, not a join with the CTE), so that a
// generic plan of the statement, which cannot know that LIMIT $2 is small,
// does not hash the whole table to find them. The suspect flag must come
// from the CTE: RETURNING sees the token this claim just wrote.
const claimSQL = `
		WITH due AS (
		    SELECT o.id, o.claim_token IS NOT NULL AS suspect
		    FROM outbox_events o
		    WHERE o.head
		      AND o.published_at IS NULL
		      AND o.parked_at IS NULL
		      AND o.next_attempt_at <= $1
		      AND (o.claimed_until IS NULL OR o.claimed_until <= $1)
		      AND o.seq = (
		          SELECT min(e.seq) FROM outbox_events e
		          WHERE e.aggregate_type = o.aggregate_type
		            AND e.aggregate_id = o.aggregate_id
		            AND e.published_at IS NULL)
		    ORDER BY o.next_attempt_at, o.seq
		    LIMIT $2
		    FOR UPDATE OF o SKIP LOCKED
		)
		UPDATE outbox_events o
		SET claimed_until = $3, claim_token = $4, attempts = o.attempts + 1
		WHERE o.id = ANY(ARRAY(SELECT id FROM due))
		RETURNING o.id::text, o.seq, o.aggregate_type, o.aggregate_id, o.event_type, o.payload, o.created_at, o.attempts,
		    o.id = ANY(ARRAY(SELECT id FROM due WHERE suspect)), coalesce(o.traceparent, '')`

// claim takes up to BatchSize due rows, skipping rows that another relay is
// claiming at this moment, rows another relay holds a live claim on, and
// rows with an earlier unpublished event of their aggregate, and counts an
// attempt on each. It returns them in seq order.
func (r *Relay) claim(ctx context.Context, now, until time.Time, token string) ([]claimedRow, error) {
	// A deadline on the round trip: a primary that froze keeps its
	// connections open and silent, and the pass would wait on it forever
	// instead of failing, logging, and claiming again on the new primary.
	ctx, cancel := context.WithTimeout(ctx, claimTimeout)
	defer cancel()
	rows, err := r.db.Query(ctx, claimSQL, now, r.cfg.BatchSize, until, token)
	if err != nil {
		return nil, fmt.Errorf("claim outbox events: %w", err)
	}
	claimed, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (claimedRow, error) {
		var c claimedRow
		// The payload is read as the bytes PostgreSQL sends (a jsonb is
		// valid JSON): into a json.RawMessage pgx would decode it to check it.
		err := row.Scan(&c.event.ID, &c.seq, &c.event.AggregateType, &c.event.AggregateID,
			&c.event.Type, (*[]byte)(&c.event.Payload), &c.event.OccurredAt, &c.attempts, &c.suspect, &c.event.TraceParent)
		c.event.OccurredAt = c.event.OccurredAt.UTC()
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("claim outbox events: %w", err)
	}
	slices.SortFunc(claimed, func(a, b claimedRow) int { return cmp.Compare(a.seq, b.seq) })
	return claimed, nil
}

// markSQL marks the rows $1 published at $2. Any relay that published a row
// may mark it, even after its claim ran out: it was published. The
// published_at guard keeps the first mark when two relays published the
// same row. It returns the rows it marked, for the lag metric.
const markSQL = `
		UPDATE outbox_events
		SET published_at = $2, claimed_until = NULL, claim_token = NULL, parked_at = NULL
		WHERE id = ANY($1::uuid[]) AND published_at IS NULL
		RETURNING id::text`

// handBackSQL hands the rows $1 back, if the claim $2 still holds them, with
// the claim's count taken back: their publish was not started, or was cut
// short by shutdown or a broker outage, not by the row. The lease is cleared
// on each of them, so that they are due at once. The suspects among them,
// $3, keep the token, and with it their suspect mark: nothing cleared them
// (they were not published), so they are still published alone.
const handBackSQL = `
		UPDATE outbox_events
		SET claimed_until = NULL, attempts = attempts - 1,
		    claim_token = CASE WHEN id = ANY($3::uuid[]) THEN claim_token END
		WHERE id = ANY($1::uuid[]) AND claim_token = $2 AND published_at IS NULL`

// book writes, in one round trip and one transaction, what the end of the
// pass must: the rows the broker acknowledged are marked published, and the
// rows it did not start are handed back. A pgx.Batch sent outside a
// transaction runs as one implicit transaction (the statements share one
// Sync), so a pass costs the claim and this commit, whatever its size. The
// broker has the events already, so it is written even if ctx ended
// meanwhile (shutdown), within markTimeout. If it fails, nothing of it is
// written: the rows wait for their lease, and the published ones are
// published again.
//
// The mark locks one head per aggregate (a claim holds no more), then its
// trigger the aggregate's next event, in seq order, as the head triggers of
// migrations/00011_ops_outbox_heads.sql require; a transaction that writes
// an event locks only the earlier events of that one aggregate, so marking
// many aggregates in one statement forms no wait cycle with it.
func (r *Relay) book(ctx context.Context, p *pass) error {
	if len(p.done) == 0 && len(p.back) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), markTimeout)
	defer cancel()
	now := r.clock.Now()
	var marked []string
	b := &pgx.Batch{}
	if len(p.done) > 0 {
		b.Queue(markSQL, eventIDs(p.done), now).Query(func(rows pgx.Rows) error {
			var err error
			marked, err = pgx.CollectRows(rows, pgx.RowTo[string])
			return err
		})
	}
	if len(p.back) > 0 {
		b.Queue(handBackSQL, eventIDs(p.back), p.token, suspectIDs(p.back))
	}
	if err := r.db.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("book outbox pass (%d published, %d handed back): %w", len(p.done), len(p.back), err)
	}
	// Counted once committed, and only for the rows this mark wrote.
	occurred := make(map[string]time.Time, len(p.done))
	for _, row := range p.done {
		occurred[row.event.ID] = row.event.OccurredAt
	}
	for _, id := range marked {
		r.metrics.CountPublished(now.Sub(occurred[id]))
	}
	return nil
}

// isolate hands back others, the rows claimed beside a suspect that the pass
// publishes alone, at once (before the suspect's publish, which may crash
// the relay) and with the claim's count taken back. The suspects among them
// stay suspects, to be published alone in turn: were they cleared, a row
// that crashes relays would hide among them in the next batch, and the
// crash would count an attempt on all of them again.
func (r *Relay) isolate(ctx context.Context, others []claimedRow, token string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), markTimeout)
	defer cancel()
	if _, err := r.db.Exec(ctx, handBackSQL, eventIDs(others), token, suspectIDs(others)); err != nil {
		return fmt.Errorf("hand back the rows claimed beside a suspect: %w", err)
	}
	return nil
}

func eventIDs(rows []claimedRow) []string {
	out := make([]string, len(rows))
	for i, row := range rows {
		out[i] = row.event.ID
	}
	return out
}

// suspectIDs are the ids of the suspects among rows; none is an empty
// array, not NULL, so that handBackSQL reads plainly.
func suspectIDs(rows []claimedRow) []string {
	out := []string{}
	for _, row := range rows {
		if row.suspect {
			out = append(out, row.event.ID)
		}
	}
	return out
}

// MaxErrorLength bounds the last error kept on a failed event (by this
// relay, and by the stream's in package outbox/stream).
const MaxErrorLength = 2000

// fail books a failed attempt on row, if this pass still holds its claim:
// the next attempt after a backoff, or, with park, the row parked. With
// uncount, the claim's count is taken back (no publish started). Like the
// mark, it is written even if ctx ended meanwhile.
func (r *Relay) fail(ctx context.Context, row claimedRow, token string, cause error, park, uncount bool) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), markTimeout)
	defer cancel()
	now := r.clock.Now()
	msg := cause.Error()
	if len(msg) > MaxErrorLength {
		msg = msg[:MaxErrorLength]
	}
	var parkedAt *time.Time
	if park {
		parkedAt = &now
	}
	taken := 0
	if uncount {
		taken = 1
	}
	tag, err := r.db.Exec(ctx, `
		UPDATE outbox_events
		SET claimed_until = NULL, claim_token = NULL, last_error = $3, next_attempt_at = $4, parked_at = $5,
		    attempts = attempts - $6::int
		WHERE id = $1 AND claim_token = $2 AND published_at IS NULL`,
		row.event.ID, token, msg, now.Add(r.cfg.delay(row.attempts)), parkedAt, taken)
	if err != nil {
		return fmt.Errorf("book failed publish of outbox event %s: %w", row.event.ID, err)
	}
	if tag.RowsAffected() == 0 {
		return nil // our claim ran out and another relay has the row
	}
	log := r.log.With("event_id", row.event.ID, "event_type", row.event.Type,
		"aggregate_id", row.event.AggregateID, "attempts", row.attempts, "error", msg)
	r.metrics.CountFailure()
	if park {
		r.metrics.CountParked()
		log.ErrorContext(ctx, "outbox event parked: the relay gave up on it; later events of its payment wait for it (unpark it once the cause is fixed)")
		return nil
	}
	log.WarnContext(ctx, "outbox publish failed; will retry")
	return nil
}

// paused reports whether the relay is pausing for a broker outage at now,
// and until when.
func (r *Relay) paused(now time.Time) (time.Time, bool) {
	r.outage.mu.Lock()
	defer r.outage.mu.Unlock()
	return r.outage.resume, !r.outage.since.IsZero() && now.Before(r.outage.resume)
}

// brokerDown records a publish that failed because the broker is
// unavailable and sets the next pause. It logs the start of an outage only.
func (r *Relay) brokerDown(ctx context.Context, cause error) {
	now := r.clock.Now()
	r.outage.mu.Lock()
	defer r.outage.mu.Unlock()
	o := &r.outage
	started := o.since.IsZero()
	if started {
		o.since = now
	}
	o.probes++
	pause := backoff.Policy{Base: r.cfg.OutageBackoff, Max: r.cfg.MaxOutageBackoff}.Delay(o.probes)
	o.resume = now.Add(pause)
	r.metrics.SetBrokerUnavailable(true)
	if started {
		r.log.WarnContext(ctx, "outbox broker unavailable: the relay pauses and retries with backoff; no attempt is counted and nothing is parked until it is back",
			"error", cause.Error(), "max_pause", r.cfg.MaxOutageBackoff)
		return
	}
	r.log.DebugContext(ctx, "outbox broker still unavailable", "error", cause.Error(), "probes", o.probes, "pause", pause)
}

// brokerUp records a successful publish; it logs the end of an outage.
func (r *Relay) brokerUp(ctx context.Context) {
	r.outage.mu.Lock()
	defer r.outage.mu.Unlock()
	o := &r.outage
	if o.since.IsZero() {
		return
	}
	r.log.InfoContext(ctx, "outbox broker available again: the relay resumes",
		"unavailable_for", r.clock.Now().Sub(o.since).Round(time.Millisecond), "failed_probes", o.probes)
	o.since, o.probes, o.resume = time.Time{}, 0, time.Time{}
	r.metrics.SetBrokerUnavailable(false)
}

// catchUpPause is how long Run waits after a pass that caught up (it
// found work, but less than a full batch) before the next one.
const catchUpPause = 50 * time.Millisecond

// Run runs passes until ctx ends: again at once while passes claim full
// batches, after catchUpPause (at most interval) when a pass caught up,
// else after interval.
func (r *Relay) Run(ctx context.Context, interval time.Duration) {
	for {
		published, claimed, err := r.runOnce(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, ErrBrokerUnavailable):
			// Logged when the outage starts and ends, not on every pass.
		case err != nil:
			r.log.ErrorContext(ctx, "outbox relay pass failed", "error", err)
		case published > 0:
			r.log.DebugContext(ctx, "outbox relay pass", "published", published, "claimed", claimed)
		}
		wait := interval
		if err == nil && claimed >= r.cfg.BatchSize {
			continue // a full batch: more may be waiting
		}
		if err == nil && claimed > 0 {
			wait = min(interval, catchUpPause)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// ErrNotParked is returned by Unpark for an event that is not parked.
var ErrNotParked = errors.New("outbox event is not parked")

// Unpark sends a parked event round again: attempts start over, and it is
// due now. It is the operator's move once the cause is fixed.
func (r *Relay) Unpark(ctx context.Context, eventID string) error {
	return Unpark(ctx, r.db, eventID, r.clock.Now())
}

// UnparkAll sends every parked event round again and returns how many.
func (r *Relay) UnparkAll(ctx context.Context) (int64, error) {
	return UnparkAll(ctx, r.db, r.clock.Now())
}

// unparkSet is the assignment that sends a parked row round again at $1.
const unparkSet = `parked_at = NULL, attempts = 0, next_attempt_at = $1, claimed_until = NULL, claim_token = NULL`

// Unpark sends the parked event eventID round again, due at now, with its
// attempts starting over. It returns an error wrapping ErrNotParked if the
// event does not exist, is not parked, or was published.
func Unpark(ctx context.Context, db DB, eventID string, now time.Time) error {
	tag, err := db.Exec(ctx, `
		UPDATE outbox_events SET `+unparkSet+`
		WHERE id = $2 AND parked_at IS NOT NULL AND published_at IS NULL`,
		now, eventID)
	if err != nil {
		return fmt.Errorf("unpark outbox event %s: %w", eventID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: %s", ErrNotParked, eventID)
	}
	return nil
}

// UnparkAll sends every parked event round again, due at now, and returns
// how many. Each payment's events still go out in order: an unparked event
// is published before the events of its payment that waited behind it.
func UnparkAll(ctx context.Context, db DB, now time.Time) (int64, error) {
	tag, err := db.Exec(ctx, `
		UPDATE outbox_events SET `+unparkSet+`
		WHERE parked_at IS NOT NULL AND published_at IS NULL`,
		now)
	if err != nil {
		return 0, fmt.Errorf("unpark outbox events: %w", err)
	}
	return tag.RowsAffected(), nil
}

// ParkedEvent is a parked outbox row, as an operator sees it.
type ParkedEvent struct {
	Event
	Attempts  int       `json:"attempts"`
	ParkedAt  time.Time `json:"parkedAt"`
	LastError string    `json:"lastError"`
}

// Parked returns up to limit parked events, the earliest parked first.
func Parked(ctx context.Context, db DB, limit int) ([]ParkedEvent, error) {
	rows, err := db.Query(ctx, `
		SELECT id::text, event_type, aggregate_type, aggregate_id, created_at, payload, attempts, parked_at, coalesce(last_error, '')
		FROM outbox_events
		WHERE parked_at IS NOT NULL AND published_at IS NULL
		ORDER BY parked_at, seq
		LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("list parked outbox events: %w", err)
	}
	parked, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ParkedEvent, error) {
		var p ParkedEvent
		err := row.Scan(&p.ID, &p.Type, &p.AggregateType, &p.AggregateID, &p.OccurredAt, &p.Payload, &p.Attempts, &p.ParkedAt, &p.LastError)
		p.OccurredAt, p.ParkedAt = p.OccurredAt.UTC(), p.ParkedAt.UTC()
		return p, err
	})
	if err != nil {
		return nil, fmt.Errorf("list parked outbox events: %w", err)
	}
	return parked, nil
}
