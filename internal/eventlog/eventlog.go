// Package eventlog is the log of every event of a tenant's payments and
// refunds, as merchants see it: GET /events and GET /events/{eventId}. The
// events and their names for merchants (payment.succeeded) are the
// registered operations' (operation.Event's Name and Hidden): this package
// names none.
//
// The log is the outbox itself. An event is in it from the commit of the
// transaction that wrote it to the outbox, and stays as long as the outbox
// keeps it (package cleanup keeps it the longer of OUTBOX_RETENTION and
// EVENT_RETENTION); nothing is copied. What merchants see of an event (its
// name, its payload without the keys only consumers read) is cut by
// PostgreSQL as it reads it, from one SQL relation built from the
// operations (Relation), which the webhook deliveries read too.
//
// The log of an earlier release was a copy, the table events, which the
// relay filled as it published. Its rows are still read, up to its
// frontier (the newest event it alone held at the upgrade, migration
// 00035), until EVENT_RETENTION has passed over them and clean-up
// (DeleteExpired) has deleted them; a later release drops the table.
//
// The relay still runs the log's publisher (Log.Publisher): before it
// publishes a batch, it fans each event out to the tenant's webhook
// endpoints in one statement (WithFanOut).
package eventlog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/cursor"
	"github.com/paymentsapi/paymentsapi/internal/ids"
	"github.com/paymentsapi/paymentsapi/internal/operation"
	"github.com/paymentsapi/paymentsapi/internal/outbox"
	"github.com/paymentsapi/paymentsapi/internal/sqlcond"
)

// Log is the event log of the registered operations' events.
type Log struct {
	db    *pgxpool.Pool
	clock clock.Clock
	log   *slog.Logger
	kinds map[string]kind // by outbox type, the events with a Name
	names []string        // the names, sorted, for the type filter
	// subjects are the resources the log's listing filters by
	// (WithSubject).
	subjects []Subject
	// relation is the log as SQL (Relation), outbox its first branch;
	// fanOut, the statement of each publish (WithFanOut); built once.
	relation, outbox, fanOut string
}

// kind is how the log reads one type of event.
type kind struct {
	name   string   // for merchants: payment.succeeded
	idKey  string   // the resource's id in the payload (its Resource.IDField)
	hidden []string // the payload's keys merchants never see
}

// Option configures a Log.
type Option func(*Log)

// WithFanOut makes each publish of the log's publisher run stmt first, in
// one statement per batch: stmt reads the batch's events, those the log
// holds, from the CTE published(id, tenant_id, type, occurred_at,
// published_at), type being the merchants' name. A batch is published at
// least once, so stmt must make nothing twice of an event it has seen
// (ON CONFLICT DO NOTHING on the event's id).
func WithFanOut(stmt string) Option { return func(l *Log) { l.fanOut = stmt } }

// A Subject is a resource that the listing (GET /events) filters by: the
// events whose data names its id in the member Member. For a payment
// (paymentId) those are its own events and its refunds', which name their
// payment too.
//
// Created answers when the tenant's resource id was created, or found
// false if the tenant has none. No event names a resource before it
// exists, so the listing reads the log back only as far as that (less
// maxClockSkew), however old the resource; and, for an id the tenant does
// not have, not at all. The log is ordered by time only: without that
// bound, a filter that matches a handful of events reads every event the
// tenant has to find them.
type Subject struct {
	Member  string
	Created func(ctx context.Context, tenant, id string) (at time.Time, found bool, err error)
}

// WithSubject makes the listing filter by s (its Member is the query
// parameter).
func WithSubject(s Subject) Option { return func(l *Log) { l.subjects = append(l.subjects, s) } }

// maxClockSkew is how much earlier than its resource's creation an event
// may be stamped: an event is stamped by the clock of the instance that
// writes it, and a resource's creation by another's.
const maxClockSkew = time.Minute

// New returns the log of mods' named events.
func New(db *pgxpool.Pool, clk clock.Clock, log *slog.Logger, mods []operation.Module, opts ...Option) *Log {
	l := &Log{db: db, clock: clk, log: log, kinds: kinds(mods)}
	for _, k := range l.kinds {
		l.names = append(l.names, k.name)
	}
	slices.Sort(l.names)
	for _, o := range opts {
		o(l)
	}
	l.relation, l.outbox = relation(l.kinds), outboxBranch(l.kinds)
	l.fanOut = fanOutStatement(l.kinds, l.fanOut)
	return l
}

func kinds(mods []operation.Module) map[string]kind {
	ks := map[string]kind{}
	for _, m := range mods {
		for _, e := range m.Events {
			if e.Name != "" {
				ks[e.Type] = kind{name: e.Name, idKey: m.Resource.IDField, hidden: append([]string{"tenantId"}, e.Hidden...)}
			}
		}
	}
	return ks
}

// Relation is the event log of mods as one SQL relation (a subquery in
// parentheses) with the columns id (uuid), tenant_id, type (the merchants'
// name), aggregate_id, occurred_at, data (jsonb: what merchants see) and
// traceparent: every event of the outbox whose operation names it and
// whose payload it can read (a tenantId, the resource's own id), and the
// rows of the copy an earlier release kept, each event once (see
// frontier). A query that filters it by tenant_id or id reads the tables'
// indexes; one that orders it and takes a page must do so in each branch
// (Log.List).
func Relation(mods []operation.Module) string { return relation(kinds(mods)) }

// Relation is the log as SQL (see the function Relation).
func (l *Log) Relation() string { return l.relation }

func relation(ks map[string]kind) string {
	return `(` + outboxBranch(ks) + `
		UNION ALL
		` + copyBranch + `)`
}

// The two branches of the log split the events at the copy's frontier
// (events_copy_frontier, set by migration 00035): the newest event the copy
// alone held then. The copy's branch reads its rows up to the frontier, a
// range of its tenant index that ends where the outbox's events begin; the
// outbox's branch reads its events after the frontier, and those up to it
// the copy does not hold (a few: events it kept out of order, a parked one
// for instance). So each event is read once, and neither branch reads
// through the other's events to find a page. The outbox's NOT EXISTS is a
// probe of the copy's primary key, made only of its events up to the
// frontier (OFFSET 0 keeps the planner from making it an anti-join, which
// would hash the copy whole).
const frontier = `(SELECT at FROM events_copy_frontier)`

// copyBranch reads the copy an earlier release kept (the table events) in
// the relation's shape.
const copyBranch = `SELECT c.id, c.tenant_id, c.type, c.aggregate_id, c.occurred_at, c.data, c.traceparent
		FROM events c
		WHERE c.occurred_at <= ` + frontier

// outboxBranch is outboxView without the events the copy's branch reads.
func outboxBranch(ks map[string]kind) string {
	return outboxView(ks) + `
		    AND (o.created_at > ` + frontier + ` OR NOT EXISTS (SELECT FROM events c WHERE c.id = o.id OFFSET 0))`
}

// outboxView reads the outbox's named, readable events as merchants see
// them. Each operation's names and hidden keys are literals of CASE
// expressions on the event's type: one scan of the outbox, no join, so
// that a newest-first scan of a tenant's index stops at its LIMIT. The
// checks of what is readable are one CASE: as separate conditions, the
// planner takes each for a filter that keeps 1 row in 200 (it has no
// statistics on them), and sorts a tenant's every event rather than scan
// its index for a page of them; as one CASE, for 1 in 2.
func outboxView(ks map[string]kind) string {
	types := slices.Sorted(func(yield func(string) bool) {
		for t := range ks {
			if !yield(t) {
				return
			}
		}
	})
	if len(types) == 0 { // nothing is named: an empty relation of the same shape
		return `SELECT o.id, o.payload->>'tenantId', o.event_type, o.aggregate_id, o.created_at, o.payload, o.traceparent
		FROM outbox_events o WHERE false`
	}
	var name, idKey, hidden, in strings.Builder
	for i, t := range types {
		k := ks[t]
		fmt.Fprintf(&name, " WHEN %s THEN %s", literal(t), literal(k.name))
		fmt.Fprintf(&idKey, " WHEN %s THEN %s", literal(t), literal(k.idKey))
		keys := make([]string, len(k.hidden))
		for j, h := range k.hidden {
			keys[j] = literal(h)
		}
		fmt.Fprintf(&hidden, " WHEN %s THEN ARRAY[%s]", literal(t), strings.Join(keys, ", "))
		if i > 0 {
			in.WriteString(", ")
		}
		in.WriteString(literal(t))
	}
	return `SELECT o.id, o.payload->>'tenantId' AS tenant_id, CASE o.event_type` + name.String() + ` END AS type,
		    o.aggregate_id, o.created_at AS occurred_at, o.payload - (CASE o.event_type` + hidden.String() + ` END)::text[] AS data,
		    o.traceparent
		FROM outbox_events o
		WHERE o.event_type IN (` + in.String() + `)
		    AND CASE WHEN jsonb_typeof(o.payload->'tenantId') = 'string' AND o.payload->>'tenantId' <> ''
		                  AND jsonb_typeof(o.payload->(CASE o.event_type` + idKey.String() + ` END)) = 'string'
		                  AND o.payload->>(CASE o.event_type` + idKey.String() + ` END) = o.aggregate_id
		             THEN true END`
}

// literal quotes s as an SQL string constant (standard_conforming_strings,
// PostgreSQL's default since 9.1).
func literal(s string) string { return `'` + strings.ReplaceAll(s, `'`, `''`) + `'` }

// Entry is one event of the log.
type Entry struct {
	ID         string          `json:"eventId"`
	Type       string          `json:"type"`
	OccurredAt time.Time       `json:"createdAt"`
	Data       json.RawMessage `json:"data"`
}

// FanOut runs the log's fan-out (WithFanOut) for events, those of a named
// type only, in one statement, and logs each one the log cannot read (no
// tenant, another resource's id, either not a string): such an event is
// not in the log, and must not hold back the events after it.
func (l *Log) FanOut(ctx context.Context, events []outbox.Event) error {
	var named []string
	for _, e := range events {
		if _, ok := l.kinds[e.Type]; ok {
			named = append(named, e.ID)
		}
	}
	if len(named) == 0 {
		return nil
	}
	rows, err := l.db.Query(ctx, l.fanOut, named, l.clock.Now())
	if err != nil {
		return fmt.Errorf("fan out %d events of the event log: %w", len(named), err)
	}
	unreadable, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("fan out %d events of the event log: %w", len(named), err)
	}
	for _, eid := range unreadable {
		l.log.ErrorContext(ctx, "event left out of the event log: its payload has no tenantId or names another resource", "event_id", eid)
	}
	return nil
}

// fanOutStatement reads the events whose ids are $1 (named ones) from the
// outbox as the log does, runs fanOut, if any, over them (the CTE
// published, $2 the time of publication), and answers the ids of those the
// log could not read.
func fanOutStatement(ks map[string]kind, fanOut string) string {
	if fanOut != "" {
		fanOut = `, fanned AS (` + fanOut + `)`
	}
	return `
		WITH given AS (
		    SELECT unnest($1::text[])::uuid AS id
		), published AS (
		    SELECT v.id, v.tenant_id, v.type, v.occurred_at, $2::timestamptz AS published_at
		    FROM (` + outboxView(ks) + `) v
		    WHERE v.id = ANY ($1::text[]::uuid[])
		)` + fanOut + `
		SELECT id::text FROM given WHERE id NOT IN (SELECT id FROM published)`
}

// Publisher returns next, each of whose publishes first runs the log's
// fan-out (WithFanOut) for its events: when it fails, nothing is published
// and every event comes back as the broker's failure, so that the relay
// backs off and hands them to a later pass.
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
	if err := p.log.FanOut(ctx, events); err != nil {
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

// Query selects a page of a tenant's events, newest first: those that meet
// every filter it gives.
type Query struct {
	Types       []string    // optional: any of these names (payment.succeeded)
	About       []SubjectID // optional: those whose data names each of these resources
	CreatedFrom time.Time   // optional: those that happened at or after it
	CreatedTo   time.Time   // optional: those that happened before it
	After       time.Time   // optional: those that happened after it (the older, exclusive form of CreatedFrom)
	Limit       int
	// Cursor is from a previous Page: a position in the log's order, which
	// with other filters means the events that meet them after it.
	Cursor string
	// since is the earliest time an event of About may have (List).
	since time.Time
}

// SubjectID names one resource of a Subject: the id in its Member.
type SubjectID struct{ Member, ID string }

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
	ErrUnknownFilter = errors.New("unknown event filter")
)

// List returns a page of the tenant's events, newest first.
func (l *Log) List(ctx context.Context, tenant string, q Query) (Page, error) {
	for _, about := range q.About {
		s, ok := l.subject(about.Member)
		if !ok {
			return Page{}, fmt.Errorf("%w: %s", ErrUnknownFilter, about.Member)
		}
		created, found, err := s.Created(ctx, tenant, about.ID)
		if err != nil {
			return Page{}, fmt.Errorf("list events: when %s %s was created: %w", about.Member, about.ID, err)
		}
		if !found {
			return Page{Items: []Entry{}}, nil // no event names what the tenant does not have
		}
		if since := created.Add(-maxClockSkew); since.After(q.since) {
			q.since = since
		}
	}
	sql, args, err := l.listQuery(tenant, q)
	if err != nil {
		return Page{}, err
	}
	rows, err := l.db.Query(ctx, sql, args...)
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

func (l *Log) subject(member string) (Subject, bool) {
	i := slices.IndexFunc(l.subjects, func(s Subject) bool { return s.Member == member })
	if i < 0 {
		return Subject{}, false
	}
	return l.subjects[i], true
}

// listQuery is List's statement: a page and one more event, newest first,
// from each branch of the log (a backward scan of the outbox's tenant
// index, and of the copy's), then the newest of the two. Each branch has
// its own ORDER BY and LIMIT: over the relation as a whole, PostgreSQL
// would read each branch in full and sort it. The filters other than time
// are applied to the events the scan reads: a rare type reads back through
// the tenant's events until it finds a page, or to the time a subject's
// resource was created (q.since).
func (l *Log) listQuery(tenant string, q Query) (string, []any, error) {
	var where sqlcond.Where
	where.Add("tenant_id = $%d", tenant)
	for _, t := range q.Types {
		if !slices.Contains(l.names, t) {
			return "", nil, ErrUnknownType
		}
	}
	if len(q.Types) > 0 {
		where.Add("type = ANY($%d::text[])", q.Types)
	}
	for _, about := range q.About {
		if _, ok := l.subject(about.Member); !ok {
			return "", nil, fmt.Errorf("%w: %s", ErrUnknownFilter, about.Member)
		}
		where.Add("data->>"+literal(about.Member)+" = $%d", about.ID)
	}
	for _, bound := range []struct {
		op string
		at time.Time
	}{{">", q.After}, {">=", q.CreatedFrom}, {">=", q.since}, {"<", q.CreatedTo}} {
		if !bound.at.IsZero() {
			where.Add("occurred_at "+bound.op+" $%d", bound.at)
		}
	}
	if q.Cursor != "" {
		at, id, err := decodeCursor(q.Cursor)
		if err != nil {
			return "", nil, err
		}
		where.Add("(occurred_at, id) < ($%d, $%d::uuid)", at, id)
	}
	limit := where.Arg(q.Limit + 1)
	page := `
		WHERE ` + where.String() + `
		ORDER BY occurred_at DESC, id DESC LIMIT $` + fmt.Sprint(limit)
	return `SELECT id::text, type, occurred_at, data FROM (
		(SELECT * FROM (` + l.outbox + `) b` + page + `)
		UNION ALL
		(SELECT * FROM (` + copyBranch + `) b` + page + `)
	) ev` + page[strings.Index(page, "ORDER BY")-3:], where.Args(), nil
}

// Get returns the tenant's event id, or ErrNotFound.
func (l *Log) Get(ctx context.Context, tenant, id string) (Entry, error) {
	if !ids.IsUUID(id) {
		return Entry{}, ErrNotFound
	}
	rows, err := l.db.Query(ctx, `SELECT id::text, type, occurred_at, data FROM `+l.relation+` ev WHERE id = $1::uuid AND tenant_id = $2`, id, tenant)
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

// DeleteExpired is the clean-up of the earlier release's copy of the log
// (the table events), run by package cleanup: it deletes at most $2 of its
// events recorded before $1 (EVENT_RETENTION), chosen with SKIP LOCKED,
// with the webhook messages and resends of those the outbox no longer
// holds (the outbox's own cascade to them).
const DeleteExpired = `
		WITH doomed AS (
		    SELECT id FROM events WHERE recorded_at <= $1
		    LIMIT $2 FOR UPDATE SKIP LOCKED
		), gone AS (
		    SELECT d.id FROM doomed d WHERE NOT EXISTS (SELECT FROM outbox_events o WHERE o.id = d.id)
		), messages AS (
		    DELETE FROM webhook_messages WHERE event_id IN (SELECT id FROM gone)
		), resends AS (
		    DELETE FROM webhook_resends WHERE event_id IN (SELECT id FROM gone)
		)
		DELETE FROM events WHERE id IN (SELECT id FROM doomed)`

func encodeCursor(at time.Time, id string) string { return cursor.Encode(at, id) }

func decodeCursor(s string) (time.Time, string, error) {
	at, id, err := cursor.Decode(s, ids.IsUUID)
	if err != nil {
		return time.Time{}, "", ErrInvalidCursor
	}
	return at, id, nil
}
