// Package ledger is a small projector of the operations' events: it consumes
// them from NATS JetStream and books exactly one ledger entry per event that
// moved money (a succeeded payment, a succeeded refund), however often an
// event is published or delivered. Which events book what is each
// registered operation's to say (operation.Event.Ledger).
//
// Exactly once rests on two keys, both written in the transaction that
// books the entry, and on acknowledging only after it commits:
//
//   - the inbox, primary key (consumer, event_id): a redelivered or
//     republished event finds its row and changes nothing;
//   - the entry's natural key, unique (payment_id, entry_type, line): a
//     second event announcing the same success (another event id) books
//     nothing.
//
// A crash before the commit books nothing and the broker redelivers; a
// crash between the commit and the acknowledgement redelivers an event the
// inbox already holds. Order does not matter: only PaymentSucceeded books an
// entry, and it carries everything the entry needs.
//
// # Rejected events, and how to replay them
//
// A PaymentSucceeded event whose payload cannot make an entry (no account, a
// bad amount or currency, a status other than SUCCEEDED, ...) is rejected,
// and that is final: it is recorded in the inbox with outcome 'rejected' and
// the reason in inbox.error, counted in
// paymentsapi_ledger_events_total{outcome="rejected"}, logged at error
// level, and acknowledged, so that the broker stops redelivering it. The
// inbox row then makes every later delivery of the same event id a
// duplicate_event. To replay a rejected event once its cause is fixed (a
// ledger release that accepts it, or corrected data):
//
//  1. Find it: SELECT event_id, aggregate_id, error, received_at FROM inbox
//     WHERE consumer = 'ledger' AND outcome = 'rejected';
//  2. Forget it: DELETE FROM inbox WHERE consumer = 'ledger' AND
//     outcome = 'rejected' AND event_id = '<event id>';
//  3. Deliver it again. While the outbox still holds the event (it is
//     kept for OUTBOX_RETENTION, 7 days by default), let the relay publish
//     it again: paymentsapi outbox replay '<event id>' (every consumer of
//     the stream gets it again, and deduplicates it by event id; the stream
//     itself drops a copy published within its duplicate window, 2 minutes,
//     of the first publish). Otherwise republish the copy the stream keeps
//     (its MaxAge is unlimited by default), e.g. with the nats CLI: nats
//     stream get PAYMENTS_EVENTS <sequence>, then nats pub on the same
//     subject with the same body (a new Nats-Msg-Id is fine: the ledger
//     deduplicates by the body's eventId).
//
// A replay books at most one entry: the entry's natural key (payment_id,
// entry_type) still holds if the payment's entry was booked meanwhile from
// another event.
package ledger

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/inbox"
	"github.com/paymentsapi/paymentsapi/internal/operation"
	"github.com/paymentsapi/paymentsapi/internal/outbox"
	"github.com/paymentsapi/paymentsapi/internal/outbox/natspub"
	"github.com/paymentsapi/paymentsapi/internal/tracing"
)

// DefaultConsumer is the inbox's consumer name and the JetStream durable
// consumer's name.
const DefaultConsumer = "ledger"

// Outcome is what handling one event did.
type Outcome string

// Outcomes of Apply, as recorded in the inbox and counted in the metric
// paymentsapi_ledger_events_total{outcome}.
const (
	// OutcomeApplied: the entry was booked.
	OutcomeApplied Outcome = "applied"
	// OutcomeDuplicateEvent: the inbox already held this event id; nothing
	// changed (not recorded again).
	OutcomeDuplicateEvent Outcome = "duplicate_event"
	// OutcomeDuplicateEntry: a new event id, but the payment's entry was
	// already booked (natural key); nothing booked.
	OutcomeDuplicateEntry Outcome = "duplicate_entry"
	// OutcomeIgnored: an event type the ledger does not book.
	OutcomeIgnored Outcome = "ignored"
	// OutcomeRejected: the payload cannot make an entry (no amount, bad
	// currency, ...). Recorded in the inbox with the reason, for a person.
	OutcomeRejected Outcome = "rejected"
)

// Outcomes of a delivery that are not outcomes of Apply, counted in the
// same metric.
const (
	outcomeMalformed = "malformed" // the message is not an event: terminated
	outcomeError     = "error"     // the database failed: redelivered later
)

// DB is what the projector needs of the database; *pgxpool.Pool has it.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Deps are the collaborators of a Projector.
type Deps struct {
	DB    DB
	Clock clock.Clock
	Log   *slog.Logger
	// Registerer gets the projector's metric; nil registers nothing.
	Registerer prometheus.Registerer
	// Modules are the registered operations: the events they declare with
	// a Ledger are the ones booked.
	Modules []operation.Module
	// Tracer makes the handling of each message a span continuing the
	// trace its traceparent header names (the relay's publish); nil or a
	// no-op provider traces nothing.
	Tracer trace.TracerProvider
}

// Projector books ledger entries from payment events.
type Projector struct {
	db       DB
	clock    clock.Clock
	log      *slog.Logger
	consumer string
	events   *prometheus.CounterVec
	tracer   trace.Tracer // nil: tracing is off
	// books maps each event type booked to how its entry is read.
	books map[string]func(outbox.Event) (operation.LedgerEntry, error)
}

// NewProjector returns a Projector recording its inbox rows as consumer
// (DefaultConsumer if empty).
func NewProjector(d Deps, consumer string) *Projector {
	if consumer == "" {
		consumer = DefaultConsumer
	}
	log := d.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	events := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "paymentsapi_ledger_events_total",
		Help: "Payment events handled by the ledger projector, by outcome: applied, duplicate_event, duplicate_entry, ignored, rejected, malformed, error.",
	}, []string{"outcome"})
	for _, o := range []string{string(OutcomeApplied), string(OutcomeDuplicateEvent), string(OutcomeDuplicateEntry),
		string(OutcomeIgnored), string(OutcomeRejected), outcomeMalformed, outcomeError} {
		events.WithLabelValues(o)
	}
	if d.Registerer != nil {
		d.Registerer.MustRegister(events)
	}
	books := map[string]func(outbox.Event) (operation.LedgerEntry, error){}
	for _, m := range d.Modules {
		for _, e := range m.Events {
			if e.Ledger != nil {
				books[e.Type] = e.Ledger
			}
		}
	}
	return &Projector{db: d.DB, clock: d.Clock, log: log, consumer: consumer, events: events, books: books, tracer: tracing.Tracer(d.Tracer)}
}

// Apply handles one event in one transaction: it records the event in the
// inbox and, for a PaymentSucceeded event, books the payment's entry. An
// error means nothing was written and the event should be delivered again.
func (p *Projector) Apply(ctx context.Context, e outbox.Event) (Outcome, error) {
	outcome, reason := OutcomeIgnored, ""
	var ent *operation.LedgerEntry
	if read := p.books[e.Type]; read != nil {
		en, err := read(e)
		if err != nil {
			outcome, reason = OutcomeRejected, err.Error()
		} else {
			outcome, ent = OutcomeApplied, &en
		}
	}
	now := p.clock.Now()
	err := pgx.BeginFunc(ctx, p.db, func(tx pgx.Tx) error {
		recorded, err := inbox.Record(ctx, tx, inbox.Entry{
			Consumer: p.consumer, EventID: e.ID, EventType: e.Type, AggregateID: e.AggregateID,
			Outcome: string(outcome), Error: reason, ReceivedAt: now,
		})
		if err != nil {
			return err
		}
		if !recorded {
			outcome = OutcomeDuplicateEvent
			return nil
		}
		if ent == nil {
			return nil
		}
		var tenant, providerRef *string
		if ent.TenantID != "" {
			tenant = &ent.TenantID
		}
		if ent.ProviderReference != "" {
			providerRef = &ent.ProviderReference
		}
		tag, err := tx.Exec(ctx, `
			-- refund_id is the entry's line (operation.LedgerEntry.Line);
			-- the column keeps the name migration 00007 gave it.
			INSERT INTO ledger_entries
			    (payment_id, entry_type, refund_id, tenant_id, account_id, amount_minor, currency, provider_reference,
			     event_id, occurred_at, created_at)
			VALUES ($1, $2, $11, $3, $4, $5, $6, $7, $8, $9, $10)
			ON CONFLICT (payment_id, entry_type, refund_id) DO NOTHING`,
			ent.PaymentID, ent.Type, tenant, ent.AccountID, ent.AmountMinor, ent.Currency, providerRef,
			e.ID, e.OccurredAt, now, ent.Line)
		if err != nil {
			return fmt.Errorf("book ledger entry of payment %s: %w", ent.PaymentID, err)
		}
		if tag.RowsAffected() == 0 {
			outcome = OutcomeDuplicateEntry
			return inbox.SetOutcome(ctx, tx, p.consumer, e.ID, string(outcome))
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	p.events.WithLabelValues(string(outcome)).Inc()
	log := p.log.With("event_id", e.ID, "event_type", e.Type, "payment_id", e.AggregateID, "outcome", string(outcome))
	switch outcome {
	case OutcomeRejected:
		log.ErrorContext(ctx, "ledger rejected an event: it cannot make an entry; recorded in the inbox", "reason", reason)
	case OutcomeApplied:
		log.InfoContext(ctx, "ledger entry booked")
	default:
		log.DebugContext(ctx, "ledger event handled")
	}
	return outcome, nil
}

// ConsumerConfig tunes the JetStream consumer of Run. Zero fields take
// their defaults.
type ConsumerConfig struct {
	// Stream is the stream to read (natspub's defaults).
	Stream natspub.StreamConfig
	// AckWait is how long the broker waits for an acknowledgement before it
	// delivers a message again (default 30s).
	AckWait time.Duration
	// HandleTimeout bounds the handling of one message (default AckWait).
	HandleTimeout time.Duration
	// RetryWait is how long Run waits between attempts to set up the
	// consumer while NATS is unreachable (default 1s).
	RetryWait time.Duration
	// Prefetch is how many messages the consumer pulls ahead of the one it
	// handles (default 20). Each waits its turn, and its AckWait runs from
	// its delivery: the broker delivers again a message not acknowledged in
	// time, so Prefetch times the handling time must stay well below AckWait.
	Prefetch int
	// PullExpiry is how long one pull request waits on the broker (default
	// 5s); the broker sends a heartbeat every half of it. A pull request
	// lost while the consumer elects a new leader (a broker node went away)
	// is noticed after two missed heartbeats, one PullExpiry: with the
	// client library's default (30s) consuming would stall 30s.
	PullExpiry time.Duration
}

func (c ConsumerConfig) withDefaults() ConsumerConfig {
	c.Stream = c.Stream.WithDefaults()
	if c.AckWait <= 0 {
		c.AckWait = 30 * time.Second
	}
	if c.HandleTimeout <= 0 {
		c.HandleTimeout = c.AckWait
	}
	if c.RetryWait <= 0 {
		c.RetryWait = time.Second
	}
	if c.Prefetch <= 0 {
		c.Prefetch = 20
	}
	if c.PullExpiry <= 0 {
		c.PullExpiry = 5 * time.Second
	}
	return c
}

// Run consumes PaymentSucceeded events with a durable JetStream consumer
// (named like the projector's consumer) until ctx ends, acknowledging each
// message only after its transaction committed. It waits for NATS while it
// is unreachable. On return, messages already received have been handled.
func (p *Projector) Run(ctx context.Context, js jetstream.JetStream, cfg ConsumerConfig) error {
	cfg = cfg.withDefaults()
	var cons jetstream.Consumer
	for {
		var err error
		cons, err = p.ensureConsumer(ctx, js, cfg)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil
		}
		p.log.WarnContext(ctx, "ledger consumer not set up yet; retrying", "error", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(cfg.RetryWait):
		}
	}
	// handling is held while a message is handled; stopped, set under it
	// once consuming stopped, turns away messages still on their way.
	var (
		handling sync.Mutex
		stopped  bool
	)
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		handling.Lock()
		defer handling.Unlock()
		if stopped {
			return // not acknowledged: delivered again later
		}
		p.handle(ctx, msg, cfg)
	},
		jetstream.PullMaxMessages(cfg.Prefetch),
		jetstream.PullExpiry(cfg.PullExpiry),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			p.log.WarnContext(ctx, "ledger consumer", "error", err)
		}))
	if err != nil {
		return fmt.Errorf("consume %s: %w", cfg.Stream.Name, err)
	}
	p.log.InfoContext(ctx, "ledger consuming", "stream", cfg.Stream.Name, "consumer", p.consumer, "prefetch", cfg.Prefetch)
	<-ctx.Done()
	cc.Drain() // handle what was already received, then stop
	select {
	case <-cc.Closed():
	case <-time.After(cfg.AckWait):
		cc.Stop()
	}
	// Wait for a handler still running (Stop does not), and let no other
	// start.
	handling.Lock()
	stopped = true
	handling.Unlock()
	return nil
}

// ensureConsumer creates or updates the durable consumer.
func (p *Projector) ensureConsumer(ctx context.Context, js jetstream.JetStream, cfg ConsumerConfig) (jetstream.Consumer, error) {
	stream, err := natspub.EnsureStream(ctx, js, cfg.Stream)
	if err != nil {
		return nil, err
	}
	cons, err := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable:        p.consumer,
		Description:    "Ledger projector: one entry per event that moved money.",
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        cfg.AckWait,
		MaxDeliver:     -1, // never give up on an event: a database outage must not lose entries
		FilterSubjects: p.subjects(cfg.Stream.SubjectPrefix),
	})
	if err != nil {
		return nil, fmt.Errorf("create consumer %s on %s: %w", p.consumer, cfg.Stream.Name, err)
	}
	return cons, nil
}

// subjects are the subjects of the event types booked, in a stable order.
func (p *Projector) subjects(prefix string) []string {
	out := make([]string, 0, len(p.books))
	for t := range p.books {
		out = append(out, natspub.Subject(prefix, t))
	}
	slices.Sort(out)
	return out
}

// handle applies one message and acknowledges it after the commit.
func (p *Projector) handle(ctx context.Context, msg jetstream.Msg, cfg ConsumerConfig) {
	e, err := natspub.Decode(msg.Data())
	if err != nil {
		// Never an event, however often delivered: stop its redelivery.
		// It stays in the stream for a person to look at.
		p.events.WithLabelValues(outcomeMalformed).Inc()
		p.log.ErrorContext(ctx, "ledger terminated a malformed message", "subject", msg.Subject(), "error", err)
		if err := msg.TermWithReason("malformed event"); err != nil {
			p.log.WarnContext(ctx, "could not terminate message", "error", err)
		}
		return
	}
	// Finish a message already started even while shutting down.
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.HandleTimeout)
	defer cancel()
	if p.tracer != nil {
		var span trace.Span
		e.TraceParent = msg.Headers().Get(tracing.HeaderTraceParent)
		hctx, span = p.tracer.Start(tracing.WithTraceParent(hctx, e.TraceParent), "process "+e.Type,
			trace.WithSpanKind(trace.SpanKindConsumer),
			trace.WithAttributes(attribute.String("messaging.operation.type", "process"),
				attribute.String("messaging.message.id", e.ID), attribute.String("messaging.consumer.group.name", p.consumer)))
		defer span.End()
		ctx = hctx // the log lines below carry the trace too
	}
	stopProgress := inProgress(msg, max(cfg.AckWait/3, time.Millisecond))
	_, err = p.Apply(hctx, e)
	stopProgress()
	if err != nil {
		trace.SpanFromContext(hctx).SetStatus(codes.Error, err.Error()) // a no-op span when untraced
		p.events.WithLabelValues(outcomeError).Inc()
		delay := time.Second
		if md, mdErr := msg.Metadata(); mdErr == nil && md.NumDelivered > 1 {
			delay = min(time.Second<<min(md.NumDelivered-1, 6), time.Minute)
		}
		p.log.WarnContext(ctx, "ledger could not handle event; it will be delivered again",
			"event_id", e.ID, "error", err, "retry_in", delay)
		if err := msg.NakWithDelay(delay); err != nil {
			p.log.WarnContext(ctx, "could not nak message; it is redelivered after the ack wait", "error", err)
		}
		return
	}
	if err := msg.Ack(); err != nil {
		// Redelivered later; the inbox recognises it.
		p.log.WarnContext(ctx, "could not acknowledge event", "event_id", e.ID, "error", err)
	}
}

// inProgress tells the broker every interval that msg is still being
// handled, so that a slow handling (a database waiting on a lock) does not
// get the message delivered again meanwhile. The returned function stops it
// and returns once it stopped.
func inProgress(msg jetstream.Msg, interval time.Duration) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				_ = msg.InProgress() // if it fails, the message is delivered again: harmless
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}
