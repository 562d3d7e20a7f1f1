// Package delivery sends the event log's events to the tenants' webhook
// endpoints (internal/endpoints), signed as the Standard Webhooks
// specification says (standardwebhooks.com), and keeps every attempt for
// GET /events/{eventId}/deliveries; POST /events/{eventId}/resend sends an
// event again (the resend_event operation, ResendModule).
//
// Fan-out. Each event of the log becomes one message per enabled endpoint
// of its tenant that takes its type, in one statement per batch the relay
// publishes, before it publishes it (FanOut, given to eventlog.WithFanOut):
// a published event has its messages, and an event published a second time
// fans nothing out to the endpoints it already has messages for.
//
// Claims. A Worker runs in every instance. A pass claims due messages in one
// short statement (ClaimSQL) with FOR UPDATE SKIP LOCKED, which sets a lease
// and counts one more on the message's fencing token; no transaction is open
// while it sends. While a claim holds a message, the message's due time is
// the lease's end, so that a worker that dies holding it (kill -9) leaves it
// due again, to any worker, once the lease ran out: delivery is at least
// once. A claim takes at most PerEndpoint messages of one endpoint in
// flight, counting every instance's (two claims made at the same instant
// may each miss the other's: then the bound is PerEndpoint per instance),
// and each message is sent by a goroutine of its own (at most Concurrency
// in an instance), so a slow or dead endpoint holds at most PerEndpoint of
// them, for at most Timeout each, and never delays another endpoint's
// messages.
//
// Fencing. An attempt is booked (the attempt's row, the message's next
// state, the endpoint's health) only while the message still carries the
// token of the claim that sent it, in one statement: a worker that finishes
// after its lease ran out and another worker claimed the message books
// nothing, and cannot overwrite the newer attempt. Two workers send one
// message at once only if one stalled past its lease; a lease is Timeout
// and a margin, and every attempt ends within Timeout.
//
// Retries. A 2xx is delivered. Anything else (another status, a redirect,
// which is never followed, a timeout, a refused destination) is retried
// after the Schedule's wait for that attempt, lengthened by jitter, never
// shortened, so a message is retried at least for the schedule's sum (3
// days and 7 hours by default); after the schedule it has failed. A 410
// Gone disables the endpoint at once; so does a failure when the endpoint
// has had no success for DisableAfter (5 days). A disabled or deleted
// endpoint's pending messages are abandoned.
package delivery

import (
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/outbound"
	"github.com/paymentsapi/paymentsapi/internal/secretbox"
	"github.com/paymentsapi/paymentsapi/internal/tracing"
)

// FanOut is the event log's fan-out (eventlog.WithFanOut): one pending
// message per event the relay is publishing and per enabled endpoint of the
// event's tenant that takes the event's type, due at once; none for an
// endpoint that has one already (the event was published before).
const FanOut = `
		INSERT INTO webhook_messages (event_id, endpoint_id, status, next_attempt_at, pending_since)
		SELECT r.id, w.id, 'pending', r.published_at, r.published_at
		FROM published r
		JOIN webhook_endpoints w ON w.tenant_id = r.tenant_id AND w.status = 'enabled' AND w.deleted_at IS NULL
		    AND (w.event_types IS NULL OR r.type = ANY (w.event_types))
		ON CONFLICT (event_id, endpoint_id) DO NOTHING`

// DefaultSchedule is the waits after each failed attempt when Config has
// none (WEBHOOK_RETRY_SCHEDULE's default): ten attempts over 3 days and 7
// hours.
func DefaultSchedule() []time.Duration {
	h := time.Hour
	return []time.Duration{5 * time.Second, 5 * time.Minute, 30 * time.Minute, 2 * h, 5 * h, 10 * h, 14 * h, 24 * h, 24 * h}
}

// Config tunes a Worker. Zero fields take their defaults.
type Config struct {
	// Policy is where messages may be sent (WEBHOOK_ALLOW_HTTP,
	// WEBHOOK_ALLOW_PRIVATE), checked at every connection.
	Policy outbound.Policy
	// Resolver resolves endpoints' hosts (nil: the system's); tests pass
	// their own.
	Resolver outbound.Resolver
	// Timeout bounds one attempt, from dial to the last byte read
	// (WEBHOOK_TIMEOUT, default 10s).
	Timeout time.Duration
	// Schedule is the wait after each failed attempt, the n-th for the
	// n-th (WEBHOOK_RETRY_SCHEDULE, default DefaultSchedule).
	Schedule []time.Duration
	// PerEndpoint is how many messages of one endpoint may be in flight at
	// once, over all instances (default 4).
	PerEndpoint int
	// Concurrency is how many messages this instance sends at once
	// (default 64).
	Concurrency int
	// Lease is how long a claim holds a message (default 2 × Timeout +
	// 10s, 30s for the default timeout): longer than an attempt and its
	// booking (bookTimeout), with room for a stalled process.
	Lease time.Duration
	// Interval is how often a Worker looks for due messages while it finds
	// none (default 1s).
	Interval time.Duration
	// DisableAfter is how long an endpoint may fail without a success
	// before it is disabled (default 5 days).
	DisableAfter time.Duration
	// KeepPrivateAnswers keeps, in the delivery log, the beginning of the
	// body of a failed answer from a private address too (dev mode, where
	// it is how a developer sees their receiver's error); otherwise only a
	// public address's answer body is kept.
	KeepPrivateAnswers bool
}

func (c Config) withDefaults() Config {
	if c.Timeout <= 0 {
		c.Timeout = outbound.DefaultTimeout
	}
	if len(c.Schedule) == 0 {
		c.Schedule = DefaultSchedule()
	}
	if c.PerEndpoint <= 0 {
		c.PerEndpoint = 4
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 64
	}
	if c.Lease <= 0 {
		c.Lease = 2*c.Timeout + 10*time.Second
	}
	if c.Interval <= 0 {
		c.Interval = time.Second
	}
	if c.DisableAfter <= 0 {
		c.DisableAfter = 5 * 24 * time.Hour
	}
	return c
}

// Deps are the collaborators of a Worker.
type Deps struct {
	DB    *pgxpool.Pool
	Clock clock.Clock
	Log   *slog.Logger
	// Metrics counts what the worker does; nil counts nothing.
	Metrics *Metrics
	// Tracer makes each send a span continuing the trace of its event, and
	// sends the receiver its traceparent; nil or a no-op provider traces
	// nothing.
	Tracer trace.TracerProvider
	// Events is the event log as SQL (eventlog.Log.Relation), where the
	// worker reads each message's event as merchants see it.
	Events string
	// Secrets opens the endpoints' sealed secrets (SECRETS_KEY); nil: only
	// an endpoint whose secret is still in the clear (written by the
	// release before migration 00043) can be signed for.
	Secrets *secretbox.Box
}

// Worker sends due messages. Run one in every instance; any number can run
// at once.
type Worker struct {
	db      *pgxpool.Pool
	clock   clock.Clock
	log     *slog.Logger
	metrics *Metrics
	client  *http.Client
	box     *secretbox.Box
	cfg     Config
	tracer  trace.Tracer // nil: tracing is off
	// claimSQL is ClaimSQL on Deps.Events, built once.
	claimSQL string

	slots chan struct{} // one per message being sent
	freed chan struct{} // a send ended (Run may claim again)

	mu     sync.Mutex
	cursor string // the endpoint after which the next claim starts
}

// NewWorker returns a Worker. It fails if cfg is inconsistent.
func NewWorker(d Deps, cfg Config) (*Worker, error) {
	cfg = cfg.withDefaults()
	if d.DB == nil || d.Clock == nil || d.Events == "" {
		return nil, errors.New("webhook delivery: DB, Clock and Events are required")
	}
	if cfg.Lease <= cfg.Timeout+bookTimeout {
		return nil, errors.New("webhook delivery: the lease must be longer than an attempt's timeout and its booking")
	}
	for _, d := range cfg.Schedule {
		if d <= 0 {
			return nil, errors.New("webhook delivery: every wait of the retry schedule must be positive")
		}
	}
	log := d.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Worker{
		db: d.DB, clock: d.Clock, log: log, metrics: d.Metrics, box: d.Secrets, cfg: cfg, tracer: tracing.Tracer(d.Tracer),
		claimSQL: ClaimSQL(d.Events),
		client:   cfg.Policy.Client(cfg.Timeout, cfg.Resolver),
		slots:    make(chan struct{}, cfg.Concurrency),
		freed:    make(chan struct{}, 1),
	}, nil
}
