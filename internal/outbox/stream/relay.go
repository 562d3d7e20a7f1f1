package stream

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/backoff"
	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/outbox"
)

// Relay publishes the outbox from a Stream: each committed transaction's
// events, in commit order, confirmed once the publisher accepted them all.
// Run one in every instance: the slot lets one read at a time, and the
// others wait their turn (Standby).
//
// Delivery is at least once: a relay that dies, or loses its connection,
// before it confirms leaves the slot where it was, and the next reader gets
// those transactions again.
//
// Order: a payment's events are first published in the order they
// committed. A batch is published in waves, the k-th wave holding the k-th
// event of each aggregate in the batch, and a wave only once every event of
// the one before it was accepted; within a wave no two events share an
// aggregate, so a failed event never lets a later one of its payment
// overtake it. A failed publish is retried with backoff, broker outage or
// not, and nothing after it is confirmed until it is accepted.
//
// Not yet here, unlike outbox.Relay: parking an event that keeps failing
// (it holds the stream back until it is accepted), catch-up after a
// failover, and metrics. Not wired into the service: see
// docs/BENCHMARKS.md.
type Relay struct {
	connString string
	pub        outbox.Publisher
	clock      clock.Clock
	log        *slog.Logger
	cfg        RelayConfig
}

// RelayConfig tunes a Relay. Zero fields take their defaults.
type RelayConfig struct {
	Options
	// BatchSize is how many events one publish carries at most (default
	// 100); a batch takes the transactions the stream already has, and
	// does not wait for more.
	BatchSize int
	// Linger is how long a batch waits for the stream's next transaction
	// once it has one (default 1ms).
	Linger time.Duration
	// Backoff and MaxBackoff space the retries of a failed publish
	// (defaults 100ms and 30s), and of a failed connection.
	Backoff, MaxBackoff time.Duration
	// Standby is how often a relay whose slot is being read by another
	// tries again (default 5s).
	Standby time.Duration
	// AfterPublish, a failpoint for tests, runs once a batch was published
	// and before it is confirmed; an error ends the session there, as a
	// crash would.
	AfterPublish func(ctx context.Context, events []outbox.Event) error
}

// NewRelay returns a Relay reading the database at connString.
func NewRelay(connString string, pub outbox.Publisher, clk clock.Clock, log *slog.Logger, cfg RelayConfig) *Relay {
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 100
	}
	if cfg.Linger <= 0 {
		cfg.Linger = time.Millisecond
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = 100 * time.Millisecond
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 30 * time.Second
	}
	if cfg.Standby <= 0 {
		cfg.Standby = 5 * time.Second
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Relay{connString: connString, pub: pub, clock: clk, log: log, cfg: cfg}
}

// Run reads and publishes until ctx ends, reconnecting after any failure.
func (r *Relay) Run(ctx context.Context) {
	policy := backoff.Policy{Base: r.cfg.Backoff, Max: r.cfg.MaxBackoff}
	failures := 0
	for ctx.Err() == nil {
		err := r.session(ctx, func() { failures = 0 })
		if ctx.Err() != nil {
			return
		}
		wait := r.cfg.Standby
		if !errors.Is(err, ErrSlotBusy) {
			failures++
			wait = policy.Delay(failures)
			r.log.WarnContext(ctx, "outbox stream interrupted; reconnecting", "error", err, "wait", wait)
		}
		if clock.Sleep(ctx, wait) != nil {
			return
		}
	}
}

// session opens the stream and publishes from it until an error; started
// runs once the stream is open.
func (r *Relay) session(ctx context.Context, started func()) error {
	s, err := Open(ctx, r.connString, r.cfg.Options)
	if err != nil {
		return err
	}
	defer s.Close(context.WithoutCancel(ctx))
	started()
	for {
		batch, end, err := r.batch(ctx, s)
		if err != nil {
			return err
		}
		if err := r.publish(ctx, batch); err != nil {
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
	}
}

// batch waits for the next transaction, then takes those that follow it
// within Linger, up to BatchSize events; end is the last one's End.
func (r *Relay) batch(ctx context.Context, s *Stream) ([]outbox.Event, LSN, error) {
	tx, err := s.Next(ctx)
	if err != nil {
		return nil, 0, err
	}
	events, end := tx.Events, tx.End
	for len(events) < r.cfg.BatchSize {
		more, cancel := context.WithTimeout(ctx, r.cfg.Linger)
		tx, err := s.Next(more)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil, 0, ctx.Err()
			}
			break // nothing more right now (a timed-out wait leaves the stream usable)
		}
		events, end = append(events, tx.Events...), tx.End
	}
	return events, end, nil
}

// publish publishes events in waves (see Relay), retrying each failed
// event until it is accepted or ctx ends.
func (r *Relay) publish(ctx context.Context, events []outbox.Event) error {
	for _, wave := range waves(events) {
		if err := r.publishWave(ctx, wave); err != nil {
			return err
		}
	}
	return nil
}

func (r *Relay) publishWave(ctx context.Context, todo []outbox.Event) error {
	policy := backoff.Policy{Base: r.cfg.Backoff, Max: r.cfg.MaxBackoff}
	for attempt := 1; ; attempt++ {
		errs := publishAll(ctx, r.pub, todo)
		var failed []outbox.Event
		var first error
		for i, err := range errs {
			if err != nil {
				failed = append(failed, todo[i])
				if first == nil {
					first = err
				}
			}
		}
		if len(failed) == 0 {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		wait := policy.Delay(attempt)
		r.log.WarnContext(ctx, "outbox publish failed; retrying, and holding back the events after it",
			"events", len(failed), "event_id", failed[0].ID, "attempt", attempt, "wait", wait, "error", first)
		if err := clock.Sleep(ctx, wait); err != nil {
			return err
		}
		todo = failed
	}
}

// publishAll publishes events, at once with a BatchPublisher.
func publishAll(ctx context.Context, pub outbox.Publisher, events []outbox.Event) []error {
	if bp, ok := pub.(outbox.BatchPublisher); ok && len(events) > 1 {
		return bp.PublishBatch(ctx, events)
	}
	errs := make([]error, len(events))
	for i, e := range events {
		errs[i] = pub.Publish(ctx, e)
	}
	return errs
}

// waves splits events (in commit order) so that wave k holds the k-th event
// of each aggregate, in the order they came.
func waves(events []outbox.Event) [][]outbox.Event {
	type aggregate struct{ typ, id string }
	seen := make(map[aggregate]int, len(events))
	var out [][]outbox.Event
	for _, e := range events {
		k := aggregate{e.AggregateType, e.AggregateID}
		n := seen[k]
		seen[k] = n + 1
		if n == len(out) {
			out = append(out, nil)
		}
		out[n] = append(out[n], e)
	}
	return out
}
