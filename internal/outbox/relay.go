package outbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

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
	// MaxAttempts is how many times a row is tried before it is parked
	// (default 10).
	MaxAttempts int
	// Backoff is the wait after the first failed attempt; it doubles with
	// each attempt, up to MaxBackoff, with jitter (defaults 1s and 5m).
	Backoff    time.Duration
	MaxBackoff time.Duration
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
	return c
}

// delay is the wait after the n-th failed attempt (n >= 1): exponential,
// capped, and jittered into [d/2, d] so that rows that failed together do
// not retry together.
func (c RelayConfig) delay(n int) time.Duration {
	d := c.MaxBackoff
	if shift := n - 1; shift < 30 && c.Backoff<<shift < c.MaxBackoff {
		d = c.Backoff << shift
	}
	return d/2 + rand.N(d/2+1)
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
// the metrics, never dropped. A row whose claim ran out MaxAttempts times
// (a relay that died on it each time) is parked on its next claim too.
// Unpark sends a parked row round again.
//
// Ordering, per payment (per aggregate). The relay never publishes an event
// while an earlier event of the same aggregate (by seq, the insertion
// order) is unpublished, parked ones included: a payment's events are first
// published in the order they happened, each only after the broker
// acknowledged the one before, and a parked PaymentCreated holds back its
// PaymentSucceeded (both stay visible: one parked, one pending, and the
// pending age grows) until it is unparked. What is not promised: a repeat.
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
	attempts int // including this one
}

// RunOnce claims one batch of due rows, publishes them one by one, and
// marks each published. It returns how many it published. Failed publishes
// are booked on their rows (backoff, or parked) and are not errors of
// RunOnce; an error means the database failed, ctx ended, or a hook said
// stop, and the rest of the batch is left to its lease.
func (r *Relay) RunOnce(ctx context.Context) (published int, err error) {
	published, _, err = r.runOnce(ctx)
	return published, err
}

func (r *Relay) runOnce(ctx context.Context) (published, claimed int, err error) {
	now := r.clock.Now()
	token := ids.NewEventID(now) // any unique value; a UUIDv7 is at hand
	until := now.Add(r.cfg.Lease)
	rows, err := r.claim(ctx, now, until, token)
	if err != nil {
		return 0, 0, err
	}
	for i, row := range rows {
		if ctx.Err() != nil || r.clock.Now().Add(r.cfg.PublishTimeout).After(until) {
			// Shutting down, or the claim is too short for one more
			// publish: hand the rest back rather than risk a second relay
			// publishing them at the same time.
			r.release(ctx, rows[i:], token)
			return published, len(rows), ctx.Err()
		}
		if row.attempts > r.cfg.MaxAttempts {
			// Claimed more often than allowed: the relays that claimed it
			// died before booking the outcome. Park it rather than loop.
			err := r.fail(ctx, row, token, fmt.Errorf("gave up: %d claims ran out without an outcome", row.attempts-1), true)
			if err != nil {
				return published, len(rows), err
			}
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, r.cfg.PublishTimeout)
		pubErr := r.pub.Publish(pctx, row.event)
		cancel()
		if pubErr != nil {
			if ctx.Err() != nil {
				// Shutting down: not the row's fault; it may even have
				// been published. Hand it back, attempt uncounted.
				r.release(ctx, rows[i:], token)
				return published, len(rows), ctx.Err()
			}
			if err := r.fail(ctx, row, token, pubErr, row.attempts >= r.cfg.MaxAttempts); err != nil {
				return published, len(rows), err
			}
			continue
		}
		if h := r.cfg.Hooks.AfterPublish; h != nil {
			if err := h(ctx, row.event); err != nil {
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
	return published, len(rows), nil
}

// claim takes up to BatchSize due rows, oldest first, skipping rows that
// another relay is claiming at this moment, rows another relay holds a live
// claim on, and rows with an earlier unpublished event of their aggregate.
func (r *Relay) claim(ctx context.Context, now, until time.Time, token string) ([]claimedRow, error) {
	rows, err := r.db.Query(ctx, `
		WITH due AS (
		    SELECT o.id
		    FROM outbox_events o
		    WHERE o.published_at IS NULL
		      AND o.parked_at IS NULL
		      AND o.next_attempt_at <= $1
		      AND (o.claimed_until IS NULL OR o.claimed_until <= $1)
		      AND NOT EXISTS (
		          SELECT 1 FROM outbox_events e
		          WHERE e.aggregate_type = o.aggregate_type
		            AND e.aggregate_id = o.aggregate_id
		            AND e.published_at IS NULL
		            AND e.seq < o.seq)
		    ORDER BY o.seq
		    LIMIT $2
		    FOR UPDATE OF o SKIP LOCKED
		)
		UPDATE outbox_events o
		SET claimed_until = $3, claim_token = $4, attempts = o.attempts + 1
		FROM due
		WHERE o.id = due.id
		RETURNING o.id::text, o.seq, o.aggregate_type, o.aggregate_id, o.event_type, o.payload, o.created_at, o.attempts`,
		now, r.cfg.BatchSize, until, token)
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

// markPublished records that row was published. Any relay that published
// the row may mark it, even after its claim ran out: it was published.
func (r *Relay) markPublished(ctx context.Context, row claimedRow) error {
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
// the next attempt after a backoff, or, with park, the row parked.
func (r *Relay) fail(ctx context.Context, row claimedRow, token string, cause error, park bool) error {
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

// release hands rows back without counting the attempt. It runs while
// shutting down too, so it does not use ctx's cancellation.
func (r *Relay) release(ctx context.Context, rows []claimedRow, token string) {
	if len(rows) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	idList := make([]string, len(rows))
	for i, row := range rows {
		idList[i] = row.event.ID
	}
	_, err := r.db.Exec(ctx, `
		UPDATE outbox_events
		SET claimed_until = NULL, claim_token = NULL, attempts = attempts - 1
		WHERE id = ANY($1::uuid[]) AND claim_token = $2 AND published_at IS NULL`,
		idList, token)
	if err != nil {
		// Harmless: the lease runs out instead.
		r.log.WarnContext(ctx, "could not release outbox claim; it will run out", "error", err, "rows", len(rows))
	}
}

// Run runs passes until ctx ends: again at once while passes find work,
// else after interval.
func (r *Relay) Run(ctx context.Context, interval time.Duration) {
	for {
		published, claimed, err := r.runOnce(ctx)
		switch {
		case ctx.Err() != nil:
			return
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
	tag, err := r.db.Exec(ctx, `
		UPDATE outbox_events
		SET parked_at = NULL, attempts = 0, next_attempt_at = $2, claimed_until = NULL, claim_token = NULL
		WHERE id = $1 AND parked_at IS NOT NULL AND published_at IS NULL`,
		eventID, r.clock.Now())
	if err != nil {
		return fmt.Errorf("unpark outbox event %s: %w", eventID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: %s", ErrNotParked, eventID)
	}
	return nil
}
