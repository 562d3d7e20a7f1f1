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

	"github.com/paymentsapi/paymentsapi/internal/backoff"
	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/ids"
)

// DB is what the relay and the metrics need of the database; *pgxpool.Pool
// has it.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
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
	// this long left, so that no row is published by two relays at once
	// unless one of them stalled past its lease.
	PublishTimeout time.Duration
	// MaxAttempts is how many publishes of a row are started before it is
	// parked (default 10). Only failures of the row count: a publish that
	// failed because the broker was unavailable, or that shutdown
	// interrupted, is handed back uncounted.
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
	// AfterPublish runs after e was published and before it is marked
	// published. An error stops RunOnce right there, as a crash would:
	// nothing more is written, and the pass's claim holds until its lease
	// runs out, after which e is published again.
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
}

// Relay publishes the outbox: it claims unpublished rows, publishes them
// with the event id as the message id, and marks them published. Run one in
// every API instance; any number can run at once.
//
// Claims. A pass claims a batch with FOR UPDATE SKIP LOCKED in one short
// statement that sets a lease (claimed_until) and a claim token on the rows;
// no transaction is open while it publishes. A row whose lease ran out (its
// relay died or stalled) is claimed again.
//
// Delivery is at least once. A crash between publish and mark publishes the
// event again, so consumers deduplicate by event id (the NATS publisher also
// sets Nats-Msg-Id, so the broker drops a repeat within its window).
//
// Failures. A failed publish is retried with exponential backoff and jitter;
// after MaxAttempts the row is parked: kept, with its last error, counted by
// the metrics, never dropped. An attempt counts when its publish starts, so a
// row whose publishes kept being cut short (a relay that died on it each
// time) is parked on its next claim too, while rows a dying relay had claimed
// but not started keep their count. Unpark and UnparkAll (the command
// `paymentsapi outbox unpark`) send parked rows round again.
//
// Broker outages. A publish error wrapping ErrBrokerUnavailable is the
// broker's fault, not the row's: the pass stops, hands its row and the rest
// of its batch back with no attempt counted, and the relay pauses (RunOnce
// claims nothing) for OutageBackoff, doubling up to MaxOutageBackoff while
// the probes keep failing, until a publish succeeds. An outage of any length
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
// pending age grows) until it is unparked. Events waiting like this cost the
// claim nothing: it reads only each aggregate's head (see claimSQL), however
// many events wait behind a parked one. What is not promised: a repeat.
// A republished event (after a crash before the mark, or a relay that
// stalled past its lease) may arrive after later events of its payment, and
// brokers redeliver unacknowledged messages out of order. Consumers must
// therefore be idempotent by event id and must not rely on order; the
// ledger only acts on PaymentSucceeded and keys its entry by payment, so
// order does not matter to it. Events of different payments have no order.
type Relay struct {
	db      DB
	pub     Publisher
	clock   clock.Clock
	log     *slog.Logger
	metrics *Metrics
	cfg     RelayConfig

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
	return &Relay{db: d.DB, pub: d.Publisher, clock: d.Clock, log: log, metrics: d.Metrics, cfg: cfg}, nil
}

// claimedRow is an outbox row held by this pass's claim.
type claimedRow struct {
	event    Event
	seq      int64
	attempts int // publishes started so far (including this one, once started)
}

// RunOnce claims one batch of due rows, publishes them one by one, and
// marks each published. It returns how many it published. Failed publishes
// are booked on their rows (backoff, or parked) and are not errors of
// RunOnce. An error wrapping ErrBrokerUnavailable means the broker is down:
// the pass stopped, or did not start because the relay is pausing, and no
// attempt was counted. Any other error means the database failed, ctx ended,
// or a hook said stop. Whenever the pass stops early, the rows it had not
// started are handed back at once.
func (r *Relay) RunOnce(ctx context.Context) (published int, err error) {
	published, _, err = r.runOnce(ctx)
	return published, err
}

// markTimeout bounds the writes that book what happened to a row; they run
// even while shutting down.
const markTimeout = 5 * time.Second

func (r *Relay) runOnce(ctx context.Context) (published, claimed int, err error) {
	now := r.clock.Now()
	if resume, paused := r.paused(now); paused {
		return 0, 0, fmt.Errorf("outbox relay pausing until %s: %w", resume.Format(time.RFC3339), ErrBrokerUnavailable)
	}
	token := ids.NewEventID(now) // any unique value; a UUIDv7 is at hand
	until := now.Add(r.cfg.Lease)
	rows, err := r.claim(ctx, now, until, token)
	if err != nil {
		return 0, 0, err
	}
	var (
		next    int    // rows[next:] are handed back when the pass ends
		uncount string // the row among them whose started attempt is taken back
		crashed bool   // a hook said stop: write nothing more, as a crash would
	)
	defer func() {
		if !crashed {
			r.release(ctx, rows[next:], token, uncount)
		}
	}()
	for i, row := range rows {
		next = i
		if ctx.Err() != nil || r.clock.Now().Add(r.cfg.PublishTimeout).After(until) {
			// Shutting down, or the claim is too short for one more
			// publish: hand the rest back rather than risk a second relay
			// publishing them at the same time.
			return published, len(rows), ctx.Err()
		}
		if row.attempts >= r.cfg.MaxAttempts {
			// Its publishes were started as often as allowed, and the
			// relays that started them died before booking the outcome.
			// Park it rather than loop.
			next = i + 1
			err := r.fail(ctx, row, token, fmt.Errorf("gave up: %d attempts ran out without an outcome", row.attempts), true)
			if err != nil {
				return published, len(rows), err
			}
			continue
		}
		attempts, held, err := r.startAttempt(ctx, row, token)
		if err != nil {
			return published, len(rows), err
		}
		if !held {
			next = i + 1 // our claim ran out and another relay has the row
			continue
		}
		row.attempts = attempts
		pctx, cancel := context.WithTimeout(ctx, r.cfg.PublishTimeout)
		pubErr := r.pub.Publish(pctx, row.event)
		cancel()
		if pubErr != nil {
			if ctx.Err() != nil {
				// Shutting down: not the row's fault; it may even have
				// been published. Hand it back, attempt uncounted.
				uncount = row.event.ID
				return published, len(rows), ctx.Err()
			}
			if errors.Is(pubErr, ErrBrokerUnavailable) {
				// Not the row's fault either, nor the next one's: hand the
				// batch back, attempt uncounted, and pause.
				uncount = row.event.ID
				r.brokerDown(ctx, pubErr)
				return published, len(rows), fmt.Errorf("outbox relay stopped its pass: %w", pubErr)
			}
			next = i + 1
			if err := r.fail(ctx, row, token, pubErr, row.attempts >= r.cfg.MaxAttempts); err != nil {
				return published, len(rows), err
			}
			continue
		}
		r.brokerUp(ctx)
		next = i + 1 // published: from here on, the row is never handed back
		if h := r.cfg.Hooks.AfterPublish; h != nil {
			if err := h(ctx, row.event); err != nil {
				crashed = true
				return published, len(rows), fmt.Errorf("outbox relay stopped after publishing event %s: %w", row.event.ID, err)
			}
		}
		if err := r.markPublished(ctx, row); err != nil {
			// Published but not marked: the lease runs out and the event
			// is published again, which consumers tolerate.
			return published, len(rows), err
		}
		published++
	}
	next = len(rows)
	return published, len(rows), nil
}

// claimSQL claims up to $2 due rows for the lease $3 under the token $4.
// The rows are taken in the order they are due, then in insertion order,
// from the partial index outbox_events_due_head_idx (next_attempt_at, seq),
// which holds only heads: rows that are (or may be) the earliest unpublished
// event of their aggregate (the column head, kept by triggers, see
// migrations/00011_ops_outbox_heads.sql). The scan stops at the first row
// not due yet, so rows waiting for a backoff cost nothing, and rows waiting
// behind an earlier unpublished event of their aggregate (parked, backing
// off or claimed) are not in the index at all, so they cost nothing either,
// however many there are. The NOT EXISTS is the ordering rule itself, and
// does not trust the flag: a row is only due once every earlier event of its
// aggregate is published. The claimed ids are looked up again by primary key
// (= ANY of an array, not a join with the CTE), so that a generic plan of
// the statement, which cannot know that LIMIT $2 is small, does not hash the
// whole table to find them.
const claimSQL = `
		WITH due AS (
		    SELECT o.id
		    FROM outbox_events o
		    WHERE o.head
		      AND o.published_at IS NULL
		      AND o.parked_at IS NULL
		      AND o.next_attempt_at <= $1
		      AND (o.claimed_until IS NULL OR o.claimed_until <= $1)
		      AND NOT EXISTS (
		          SELECT 1 FROM outbox_events e
		          WHERE e.aggregate_type = o.aggregate_type
		            AND e.aggregate_id = o.aggregate_id
		            AND e.published_at IS NULL
		            AND e.seq < o.seq)
		    ORDER BY o.next_attempt_at, o.seq
		    LIMIT $2
		    FOR UPDATE OF o SKIP LOCKED
		)
		UPDATE outbox_events o
		SET claimed_until = $3, claim_token = $4
		WHERE o.id = ANY(ARRAY(SELECT id FROM due))
		RETURNING o.id::text, o.seq, o.aggregate_type, o.aggregate_id, o.event_type, o.payload, o.created_at, o.attempts`

// claim takes up to BatchSize due rows, skipping rows that another relay is
// claiming at this moment, rows another relay holds a live claim on, and
// rows with an earlier unpublished event of their aggregate. It counts no
// attempt: startAttempt does, when a publish starts.
func (r *Relay) claim(ctx context.Context, now, until time.Time, token string) ([]claimedRow, error) {
	rows, err := r.db.Query(ctx, claimSQL, now, r.cfg.BatchSize, until, token)
	if err != nil {
		return nil, fmt.Errorf("claim outbox events: %w", err)
	}
	claimed, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (claimedRow, error) {
		var c claimedRow
		err := row.Scan(&c.event.ID, &c.seq, &c.event.AggregateType, &c.event.AggregateID,
			&c.event.Type, &c.event.Payload, &c.event.OccurredAt, &c.attempts)
		c.event.OccurredAt = c.event.OccurredAt.UTC()
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("claim outbox events: %w", err)
	}
	slices.SortFunc(claimed, func(a, b claimedRow) int { return cmp.Compare(a.seq, b.seq) })
	return claimed, nil
}

// startAttempt counts the attempt about to start on row, if this pass still
// holds its claim (held is false when it ran out and another relay claimed
// the row: then the row must not be published by this pass).
func (r *Relay) startAttempt(ctx context.Context, row claimedRow, token string) (attempts int, held bool, err error) {
	err = r.db.QueryRow(ctx, `
		UPDATE outbox_events SET attempts = attempts + 1
		WHERE id = $1 AND claim_token = $2 AND published_at IS NULL
		RETURNING attempts`,
		row.event.ID, token).Scan(&attempts)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("start publishing outbox event %s: %w", row.event.ID, err)
	}
	return attempts, true, nil
}

// markPublished records that row was published. Any relay that published
// the row may mark it, even after its claim ran out: it was published. The
// broker has the event already, so the mark is written even if ctx ended
// meanwhile (shutdown), within markTimeout.
func (r *Relay) markPublished(ctx context.Context, row claimedRow) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), markTimeout)
	defer cancel()
	now := r.clock.Now()
	tag, err := r.db.Exec(ctx, `
		UPDATE outbox_events
		SET published_at = $2, claimed_until = NULL, claim_token = NULL, parked_at = NULL
		WHERE id = $1 AND published_at IS NULL`,
		row.event.ID, now)
	if err != nil {
		return fmt.Errorf("mark outbox event %s published: %w", row.event.ID, err)
	}
	if tag.RowsAffected() == 1 {
		r.metrics.published(now.Sub(row.event.OccurredAt))
	}
	return nil
}

// maxErrorLength bounds the last_error kept on a row.
const maxErrorLength = 2000

// fail books a failed attempt on row, if this pass still holds its claim:
// the next attempt after a backoff, or, with park, the row parked. Like the
// mark, it is written even if ctx ended meanwhile.
func (r *Relay) fail(ctx context.Context, row claimedRow, token string, cause error, park bool) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), markTimeout)
	defer cancel()
	now := r.clock.Now()
	msg := cause.Error()
	if len(msg) > maxErrorLength {
		msg = msg[:maxErrorLength]
	}
	var parkedAt *time.Time
	if park {
		parkedAt = &now
	}
	tag, err := r.db.Exec(ctx, `
		UPDATE outbox_events
		SET claimed_until = NULL, claim_token = NULL, last_error = $3, next_attempt_at = $4, parked_at = $5
		WHERE id = $1 AND claim_token = $2 AND published_at IS NULL`,
		row.event.ID, token, msg, now.Add(r.cfg.delay(row.attempts)), parkedAt)
	if err != nil {
		return fmt.Errorf("book failed publish of outbox event %s: %w", row.event.ID, err)
	}
	if tag.RowsAffected() == 0 {
		return nil // our claim ran out and another relay has the row
	}
	log := r.log.With("event_id", row.event.ID, "event_type", row.event.Type,
		"aggregate_id", row.event.AggregateID, "attempts", row.attempts, "error", msg)
	r.metrics.failed()
	if park {
		r.metrics.parkedOne()
		log.ErrorContext(ctx, "outbox event parked: the relay gave up on it; later events of its payment wait for it (unpark it once the cause is fixed)")
		return nil
	}
	log.WarnContext(ctx, "outbox publish failed; will retry")
	return nil
}

// release hands rows back, if this pass still holds their claim. Their
// attempts were not started, except the one of the row uncount names (if
// any), which is taken back: it was cut short by shutdown or by a broker
// outage, not by the row. It runs while shutting down too, so it does not
// use ctx's cancellation.
func (r *Relay) release(ctx context.Context, rows []claimedRow, token, uncount string) {
	if len(rows) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), markTimeout)
	defer cancel()
	idList := make([]string, len(rows))
	for i, row := range rows {
		idList[i] = row.event.ID
	}
	var uncountArg *string
	if uncount != "" {
		uncountArg = &uncount
	}
	_, err := r.db.Exec(ctx, `
		UPDATE outbox_events
		SET claimed_until = NULL, claim_token = NULL,
		    attempts = attempts - CASE WHEN id = $3::uuid THEN 1 ELSE 0 END
		WHERE id = ANY($1::uuid[]) AND claim_token = $2 AND published_at IS NULL`,
		idList, token, uncountArg)
	if err != nil {
		// Harmless: the lease runs out instead.
		r.log.WarnContext(ctx, "could not release outbox claim; it will run out", "error", err, "rows", len(rows))
	}
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
	r.metrics.setBrokerUnavailable(true)
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
	r.metrics.setBrokerUnavailable(false)
}

// Run runs passes until ctx ends: again at once while passes find work,
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
		if err == nil && claimed > 0 {
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
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
