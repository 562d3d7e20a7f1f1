// Package cleanup enforces the retention policy, in small batches:
//
//   - IDEMPOTENCY_TTL after a key's final answer, the stored response body and
//     headers are erased. The key's metadata stays: a retry with the same key
//     and command gets 409 IDEMPOTENCY_KEY_EXPIRED with the payment id, a
//     different command 422; never a new charge.
//   - IDEMPOTENCY_METADATA_TTL later the key is deleted, and may be used again.
//   - Outbox events are deleted after the outbox retention, but those the
//     relay could still have to publish: parked ones, and those a new slot's
//     catch-up would read (outbox.DeletePublished).
//   - Inbox rows of the event consumers (the ledger, the Stripe webhooks) are deleted
//     INBOX_RETENTION after they were received, except rejected ones, which
//     are kept for a person, like parked outbox events. The inbox only has
//     to remember an event id while a copy of the event can still arrive:
//     the broker redelivers an unacknowledged message after its ack wait
//     (30 s) and drops a republished copy within its duplicate window
//     (2 min), and the relay republishes what it had not confirmed when it
//     stopped, and after a failover what committed since a few minutes
//     before its recorded position; a copy can arrive later only if the consumer
//     stayed down (its acknowledgement lost) that long. The retention is
//     measured in days, far beyond any of these; and a copy that arrives
//     even later still books nothing, because the ledger entry's natural
//     key (payment, entry type, refund) refuses a second entry. The same
//     retention applies to the Stripe webhooks' inbox rows: a delivery
//     that arrives after its row was deleted only prompts a lookup of the
//     resource (webhooks), never a charge.
//
// A key without a final answer (in flight, unknown outcome, retryable) is
// never touched, however old. Payments themselves are business records and
// are never deleted.
package cleanup

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/eventlog"
	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/inbox"
	"github.com/paymentsapi/paymentsapi/internal/outbox"
)

// Policy is the retention policy.
type Policy struct {
	ReplayTTL   time.Duration // IDEMPOTENCY_TTL
	MetadataTTL time.Duration // IDEMPOTENCY_METADATA_TTL, counted after ReplayTTL
	// OutboxRetention is how long outbox events are kept (OUTBOX_RETENTION);
	// since the outbox is the event log too, it keeps them EventRetention
	// when that is longer, and all of them when that is zero.
	OutboxRetention time.Duration
	// InboxRetention is how long consumers' inbox rows are kept after they
	// were received (INBOX_RETENTION); zero keeps them all.
	InboxRetention time.Duration
	// EventRetention is how long the event log keeps an event
	// (EVENT_RETENTION); zero keeps them all. The log is the outbox, and
	// the copy an earlier release kept (the table events, whose rows go
	// after EventRetention whatever OutboxRetention is).
	EventRetention time.Duration
	BatchSize      int // rows per transaction; default 500
	// Share is the largest share of its time a pass spends in statements
	// while it catches up (default 0.1): after each full batch it rests
	// (1-Share)/Share times as long as the batch took, so that clean-up of
	// a backlog (a replay window shortened, a janitor that was down) takes
	// a bounded part of the database from live traffic, and slows down by
	// itself when the database is busy. A last, partial batch ends the step
	// without a rest.
	Share float64
}

// Stats counts what one pass did.
type Stats struct {
	BodiesErased     int
	KeysDeleted      int
	EventsDeleted    int
	InboxRowsDeleted int
	LogEventsDeleted int
	Batches          int
	LargestBatchRows int
	// Rested is how long the pass rested between batches (Policy.Share).
	Rested time.Duration
}

// Janitor runs the retention policy.
type Janitor struct {
	db     *pgxpool.Pool
	clock  clock.Clock
	policy Policy
	log    *slog.Logger
	// rest waits d (or until ctx ends); a test may count the rests instead.
	rest func(ctx context.Context, d time.Duration) error
	// stopwatch starts timing a batch and returns what stops it and says
	// how long the batch took; a test may report chosen durations instead.
	// By default wall time, not the service's clock: what the batch cost
	// the database, to rest in proportion.
	stopwatch func() (stop func() time.Duration)
}

// wallStopwatch is Janitor.stopwatch's default.
func wallStopwatch() func() time.Duration {
	began := time.Now()
	return func() time.Duration { return time.Since(began) }
}

// New returns a Janitor.
func New(db *pgxpool.Pool, clk clock.Clock, p Policy, log *slog.Logger) *Janitor {
	if p.BatchSize <= 0 {
		p.BatchSize = 500
	}
	if p.Share <= 0 || p.Share > 1 {
		p.Share = DefaultShare
	}
	return &Janitor{db: db, clock: clk, policy: p, log: log, rest: clock.Sleep, stopwatch: wallStopwatch}
}

// DefaultShare is Policy.Share's default.
const DefaultShare = 0.1

// The steps of a pass are the statements of the packages that own the
// tables (each package writes only its own): each handles at most $2 rows
// older than $1, chosen with SKIP LOCKED so that clean-up never waits for,
// or blocks, live traffic.

// statementTimeout bounds one batch of deletes. A batch is a bounded
// number of rows chosen with SKIP LOCKED; it takes well under a second on a
// healthy database.
const statementTimeout = 30 * time.Second

// RunOnce applies the policy until nothing is left to do.
func (j *Janitor) RunOnce(ctx context.Context) (Stats, error) {
	var st Stats
	now := j.clock.Now()
	type step struct {
		name   string
		sql    string
		cutoff time.Time
		count  *int
	}
	steps := []step{
		{"erase expired response bodies", idempotency.EraseExpiredAnswers, now.Add(-j.policy.ReplayTTL), &st.BodiesErased},
		{"delete expired keys", idempotency.DeleteExpiredKeys, now.Add(-j.policy.ReplayTTL - j.policy.MetadataTTL), &st.KeysDeleted},
	}
	// The outbox is the event log: its events stay the longer of the two.
	if j.policy.EventRetention > 0 {
		keep := max(j.policy.OutboxRetention, j.policy.EventRetention)
		steps = append(steps, step{"delete old outbox events", outbox.DeletePublished, now.Add(-keep), &st.EventsDeleted})
	}
	if j.policy.InboxRetention > 0 {
		steps = append(steps, step{"delete old inbox rows", inbox.DeleteReceived, now.Add(-j.policy.InboxRetention), &st.InboxRowsDeleted})
	}
	if j.policy.EventRetention > 0 {
		steps = append(steps, step{"delete old events of the event log", eventlog.DeleteExpired, now.Add(-j.policy.EventRetention), &st.LogEventsDeleted})
	}
	for _, step := range steps {
		for {
			// A deadline on each batch: a frozen primary fails the pass,
			// which Run logs and runs again, instead of holding it forever.
			sctx, cancel := context.WithTimeout(ctx, statementTimeout)
			stop := j.stopwatch()
			tag, err := j.db.Exec(sctx, step.sql, step.cutoff, j.policy.BatchSize)
			took := stop()
			cancel()
			if err != nil {
				return st, fmt.Errorf("%s: %w", step.name, err)
			}
			n := int(tag.RowsAffected())
			*step.count += n
			if n > 0 {
				st.Batches++
				st.LargestBatchRows = max(st.LargestBatchRows, n)
			}
			if n < j.policy.BatchSize {
				break
			}
			pause := time.Duration(float64(took) * (1 - j.policy.Share) / j.policy.Share)
			st.Rested += pause
			if err := j.rest(ctx, pause); err != nil {
				return st, err
			}
		}
	}
	return st, nil
}

// Run applies the policy every interval until ctx ends.
func (j *Janitor) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		st, err := j.RunOnce(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			j.log.ErrorContext(ctx, "clean-up pass failed", "error", err)
		case st.Batches > 0:
			j.log.InfoContext(ctx, "clean-up pass", "bodies_erased", st.BodiesErased,
				"keys_deleted", st.KeysDeleted, "events_deleted", st.EventsDeleted, "inbox_rows_deleted", st.InboxRowsDeleted,
				"rested", st.Rested.Round(time.Millisecond))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
