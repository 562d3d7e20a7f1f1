// Package eventlog is the log of every event of a tenant's payments and
// refunds, as merchants see it: GET /events and GET /events/{eventId}, kept
// EVENT_RETENTION (package cleanup runs DeleteExpired). The events and their
// names for merchants (payment.succeeded) are the registered operations'
// (operation.Event's Name and Hidden): this package names none.
//
// The outbox relay records each event here before it publishes it
// (Log.Publisher wraps the relay's publisher), so the log sees what the
// broker sees, at least once; the event's id is the key, so a second
// recording of one event changes nothing.
package eventlog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/cursor"
	"github.com/paymentsapi/paymentsapi/internal/ids"
	"github.com/paymentsapi/paymentsapi/internal/operation"
	"github.com/paymentsapi/paymentsapi/internal/outbox"
)

// Log is the event log of the registered operations' events.
type Log struct {
	db    *pgxpool.Pool
	clock clock.Clock
	log   *slog.Logger
	kinds map[string]kind // by outbox type, the events with a Name
	names map[string]bool // the names, for the type filter
	// fanOut is run by each recording, in its statement (WithFanOut).
	fanOut string
	record string // the statement of Record, built once
}

// kind is how the log reads one type of event.
type kind struct {
	name   string // for merchants: payment.succeeded
	idKey  string // the resource's id in the payload (its Resource.IDField)
	hidden string // the payload's keys merchants never see, comma-separated
}

// Option configures a Log.
type Option func(*Log)

// WithFanOut makes each recording run stmt too, in the same statement: stmt
// reads the events the recording added, and only those (not an event that
// was already there, so a second recording of an event fans nothing out),
// from the CTE recorded(id, tenant_id, type, occurred_at, recorded_at). So
// what follows from an event (the webhook messages to merchants) exists
// exactly when the event is in the log, at no extra round trip.
func WithFanOut(stmt string) Option { return func(l *Log) { l.fanOut = stmt } }

// New returns the log of mods' named events.
func New(db *pgxpool.Pool, clk clock.Clock, log *slog.Logger, mods []operation.Module, opts ...Option) *Log {
	l := &Log{db: db, clock: clk, log: log, kinds: map[string]kind{}, names: map[string]bool{}}
	for _, m := range mods {
		for _, e := range m.Events {
			if e.Name != "" {
				hidden := strings.Join(append([]string{"tenantId"}, e.Hidden...), ",")
				l.kinds[e.Type] = kind{name: e.Name, idKey: m.Resource.IDField, hidden: hidden}
				l.names[e.Name] = true
			}
		}
	}
	for _, o := range opts {
		o(l)
	}
	l.record = recordStatement(l.fanOut)
	return l
}

// Entry is one event of the log.
type Entry struct {
	ID         string          `json:"eventId"`
	Type       string          `json:"type"`
	OccurredAt time.Time       `json:"createdAt"`
	Data       json.RawMessage `json:"data"`
}

// Record adds events to the log, those of a named type only, in one
// statement; an event already there is left as it is. What merchants see of
// an event is cut from its payload by PostgreSQL (see operation.Event's
// Hidden): the payload is neither decoded nor encoded again here. An event
// whose payload its operation cannot read (no tenant, another resource's id,
// either not a string) is left out, and logged: it must not hold back the
// events after it. Each payload must be JSON, as the outbox's jsonb column
// holds it: one that is not fails the whole statement.
func (l *Log) Record(ctx context.Context, events []outbox.Event) error {
	var (
		id, name, aggregate, payload, traceparent, idKey, hidden []string
		occurred                                                 []time.Time
	)
	for _, e := range events {
		k, ok := l.kinds[e.Type]
		if !ok {
			continue
		}
		id, name, aggregate = append(id, e.ID), append(name, k.name), append(aggregate, e.AggregateID)
		occurred, payload = append(occurred, e.OccurredAt), append(payload, string(e.Payload))
		traceparent, idKey, hidden = append(traceparent, e.TraceParent), append(idKey, k.idKey), append(hidden, k.hidden)
	}
	if len(id) == 0 {
		return nil
	}
	rows, err := l.db.Query(ctx, l.record, id, name, aggregate, occurred, payload, traceparent, idKey, hidden, l.clock.Now())
	if err != nil {
		return fmt.Errorf("record %d events in the event log: %w", len(id), err)
	}
	unreadable, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("record %d events in the event log: %w", len(id), err)
	}
	for _, eid := range unreadable {
		l.log.ErrorContext(ctx, "event left out of the event log: its payload has no tenantId or names another resource", "event_id", eid)
	}
	return nil
}

// recordStatement records events given as arrays, one element per event:
// ids, names, aggregate ids, times, payloads, traceparents, the key of the
// resource's id in each payload and the keys to hide from merchants. It
// answers the ids of the events it could not read. fanOut, if any, runs in
// it too, reading the CTE recorded (see WithFanOut).
func recordStatement(fanOut string) string {
	if fanOut != "" {
		fanOut = `, fanned AS (` + fanOut + `)`
	}
	return `
		WITH given AS (
		    SELECT i::uuid AS id, n, a, o, d::jsonb AS payload, nullif(tp, '') AS traceparent, k, string_to_array(h, ',') AS hidden
		    FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[], $5::text[], $6::text[], $7::text[], $8::text[])
		        AS x(i, n, a, o, d, tp, k, h)
		), readable AS (
		    SELECT * FROM given
		    WHERE jsonb_typeof(payload) = 'object'
		        AND jsonb_typeof(payload->'tenantId') = 'string' AND payload->>'tenantId' <> ''
		        AND jsonb_typeof(payload->k) = 'string' AND payload->>k = a
		), recorded AS (
		    INSERT INTO events (id, tenant_id, type, aggregate_id, occurred_at, data, recorded_at, traceparent)
		    SELECT id, payload->>'tenantId', n, a, o, payload - hidden, $9, traceparent FROM readable
		    ON CONFLICT (id) DO NOTHING
		    RETURNING id, tenant_id, type, occurred_at, recorded_at
		)` + fanOut + `
		SELECT id::text FROM given WHERE id NOT IN (SELECT id FROM readable)`
}

// Publisher returns next, each of whose publishes first records its events
// in the log: when the log cannot, nothing is published and every event
// comes back as the broker's failure, so that the relay backs off and hands
// them to a later pass.
func (l *Log) Publisher(next outbox.Publisher) outbox.BatchPublisher {
	return &publisher{log: l, next: next}
}

type publisher struct {
	log  *Log
	next outbox.Publisher
}

func (p *publisher) Publish(ctx context.Context, e outbox.Event) error {
	return p.PublishBatch(ctx, []outbox.Event{e})[0]
}

func (p *publisher) PublishBatch(ctx context.Context, events []outbox.Event) []error {
	if err := p.log.Record(ctx, events); err != nil {
		errs := make([]error, len(events))
		for i := range errs {
			errs[i] = fmt.Errorf("%w: %w", outbox.ErrBrokerUnavailable, err)
		}
		return errs
	}
	if b, ok := p.next.(outbox.BatchPublisher); ok {
		return b.PublishBatch(ctx, events)
	}
	errs := make([]error, len(events))
	for i, e := range events {
		errs[i] = p.next.Publish(ctx, e)
	}
	return errs
}

// Query selects a page of a tenant's events, newest first.
type Query struct {
	Type   string    // optional: one name (payment.succeeded)
	After  time.Time // optional: only events that happened after it
	Limit  int
	Cursor string // from a previous Page
}

// Page is one page of a listing.
type Page struct {
	Items      []Entry `json:"items"`
	NextCursor string  `json:"nextCursor,omitempty"`
}

// Errors of the reads.
var (
	ErrNotFound      = errors.New("event not found")
	ErrInvalidCursor = errors.New("invalid cursor")
	ErrUnknownType   = errors.New("unknown event type")
)

// List returns a page of the tenant's events, newest first.
func (l *Log) List(ctx context.Context, tenant string, q Query) (Page, error) {
	where, args := []string{"tenant_id = $1"}, []any{tenant}
	if q.Type != "" {
		if !l.names[q.Type] {
			return Page{}, ErrUnknownType
		}
		args = append(args, q.Type)
		where = append(where, fmt.Sprintf("type = $%d", len(args)))
	}
	if !q.After.IsZero() {
		args = append(args, q.After)
		where = append(where, fmt.Sprintf("occurred_at > $%d", len(args)))
	}
	if q.Cursor != "" {
		at, id, err := decodeCursor(q.Cursor)
		if err != nil {
			return Page{}, err
		}
		args = append(args, at, id)
		where = append(where, fmt.Sprintf("(occurred_at, id) < ($%d, $%d::uuid)", len(args)-1, len(args)))
	}
	args = append(args, q.Limit+1)
	rows, err := l.db.Query(ctx, `SELECT id::text, type, occurred_at, data FROM events
		WHERE `+strings.Join(where, " AND ")+`
		ORDER BY occurred_at DESC, id DESC LIMIT $`+fmt.Sprint(len(args)), args...)
	if err != nil {
		return Page{}, fmt.Errorf("list events: %w", err)
	}
	items, err := pgx.CollectRows(rows, scanEntry)
	if err != nil {
		return Page{}, fmt.Errorf("list events: %w", err)
	}
	page := Page{Items: items}
	if len(items) > q.Limit {
		page.Items = items[:q.Limit]
		last := page.Items[q.Limit-1]
		page.NextCursor = encodeCursor(last.OccurredAt, last.ID)
	}
	if page.Items == nil {
		page.Items = []Entry{}
	}
	return page, nil
}

// Get returns the tenant's event id, or ErrNotFound.
func (l *Log) Get(ctx context.Context, tenant, id string) (Entry, error) {
	if !ids.IsUUID(id) {
		return Entry{}, ErrNotFound
	}
	rows, err := l.db.Query(ctx, `SELECT id::text, type, occurred_at, data FROM events WHERE id = $1::uuid AND tenant_id = $2`, id, tenant)
	if err != nil {
		return Entry{}, fmt.Errorf("read event: %w", err)
	}
	e, err := pgx.CollectExactlyOneRow(rows, scanEntry)
	if errors.Is(err, pgx.ErrNoRows) {
		return Entry{}, ErrNotFound
	}
	return e, err
}

func scanEntry(row pgx.CollectableRow) (Entry, error) {
	var e Entry
	err := row.Scan(&e.ID, &e.Type, &e.OccurredAt, &e.Data)
	e.OccurredAt = e.OccurredAt.UTC()
	return e, err
}

// DeleteExpired is the event log's clean-up, run by package cleanup: it
// deletes at most $2 events recorded before $1 (EVENT_RETENTION), chosen
// with SKIP LOCKED.
const DeleteExpired = `
		DELETE FROM events
		WHERE id = ANY(ARRAY(
		    SELECT id FROM events WHERE recorded_at <= $1
		    LIMIT $2 FOR UPDATE SKIP LOCKED))`

func encodeCursor(at time.Time, id string) string { return cursor.Encode(at, id) }

func decodeCursor(s string) (time.Time, string, error) {
	at, id, err := cursor.Decode(s, ids.IsUUID)
	if err != nil {
		return time.Time{}, "", ErrInvalidCursor
	}
	return at, id, nil
}
