// Package outbox is the transactional outbox: events are written in the
// same transaction as the state change they announce, and published later,
// at least once, a payment's in the order they committed, by one of two
// readers: package outbox/stream reads them from a logical replication
// slot, package outbox/poll polls the table (package outbox/relay chooses).
// Both publish through a Sender, which holds what they share: order within
// a batch, retries, parked events. Consumers deduplicate by event id.
package outbox

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/paymentsapi/paymentsapi/internal/claim"
	"github.com/paymentsapi/paymentsapi/internal/ids"
	"github.com/paymentsapi/paymentsapi/internal/jsontext"
	"github.com/paymentsapi/paymentsapi/internal/rowset"
	"github.com/paymentsapi/paymentsapi/internal/tracing"
)

// The audit log's actions of an operator on the outbox (package audit):
// parked events released, or events published once more (`paymentsapi
// outbox`).
const (
	AuditUnparked = "outbox.events_unparked"
	AuditReplayed = "outbox.events_replayed"
)

// Event is one message to publish. ID is the message id downstream.
type Event struct {
	ID            string          `json:"eventId"`
	Type          string          `json:"type"`
	AggregateType string          `json:"aggregateType"`
	AggregateID   string          `json:"aggregateId"`
	OccurredAt    time.Time       `json:"occurredAt"`
	Payload       json.RawMessage `json:"payload"`
	// TraceParent is the W3C traceparent of the span the event was created
	// under ("" when untraced). It travels beside the event, never in its
	// body: in the outbox row, the event log, and a NATS header.
	TraceParent string `json:"-"`
}

// NewEvent builds an event about the aggregate (aggregateType, aggregateID)
// with a fresh time-ordered id, in the trace of ctx (see TraceParent): its
// publish and deliveries continue the trace that created it.
func NewEvent(ctx context.Context, eventType, aggregateType, aggregateID string, payload any, now time.Time) (Event, error) {
	raw, err := jsontext.Marshal(payload)
	if err != nil {
		return Event{}, fmt.Errorf("encode %s payload: %w", eventType, err)
	}
	return Event{
		ID:            ids.NewEventID(now),
		Type:          eventType,
		AggregateType: aggregateType,
		AggregateID:   aggregateID,
		OccurredAt:    now,
		Payload:       raw,
		TraceParent:   tracing.TraceParent(ctx),
	}, nil
}

// AppendJSON appends e's JSON form (json.Marshal(e)'s fields, in its order:
// eventId, type, aggregateType, aggregateId, occurredAt, payload) to dst,
// for the publishers. The payload goes in as it is, not checked, compacted
// and HTML-escaped as json.Marshal would: it is valid JSON by construction
// (NewEvent encodes it, the outbox's column is jsonb), and it is the largest
// part of an event. So consumers get the same event, not always the same
// bytes: a payload read back from the outbox is PostgreSQL's jsonb text,
// with a space after each colon and comma and <, > and & as they are. One
// with a line break in it (only a hand-made one could have one) is
// compacted, so that an event is always one line.
func AppendJSON(dst []byte, e Event) ([]byte, error) {
	dst = append(dst, `{"eventId":`...)
	dst = jsontext.AppendString(dst, e.ID)
	dst = append(dst, `,"type":`...)
	dst = jsontext.AppendString(dst, e.Type)
	dst = append(dst, `,"aggregateType":`...)
	dst = jsontext.AppendString(dst, e.AggregateType)
	dst = append(dst, `,"aggregateId":`...)
	dst = jsontext.AppendString(dst, e.AggregateID)
	dst = append(dst, `,"occurredAt":"`...)
	dst = e.OccurredAt.AppendFormat(dst, time.RFC3339Nano)
	dst = append(dst, `","payload":`...)
	switch {
	case len(e.Payload) == 0:
		dst = append(dst, "null"...)
	case bytes.ContainsAny(e.Payload, "\r\n"):
		var b bytes.Buffer
		if err := json.Compact(&b, e.Payload); err != nil {
			return dst, fmt.Errorf("encode event %s: %w", e.ID, err)
		}
		dst = append(dst, b.Bytes()...)
	default:
		dst = append(dst, e.Payload...)
	}
	return append(dst, '}'), nil
}

// Queue adds the insert of e to b, so that it commits or rolls back with the
// state change queued beside it.
func Queue(b *pgx.Batch, e Event) { b.Queue(insertSQL, args(e)...) }

// Write writes events to the outbox in one round trip, in db's transaction
// if db is one (pgx.Tx), else in one of their own: for what writes events
// alone, as a tool or a test does. A state change queues its events beside
// it instead (Queue, IfClaimed).
func Write(ctx context.Context, db DB, events ...Event) error {
	var b pgx.Batch
	for _, e := range events {
		Queue(&b, e)
	}
	if err := db.SendBatch(ctx, &b).Close(); err != nil {
		return fmt.Errorf("write %d outbox events: %w", len(events), err)
	}
	return nil
}

// IfClaimed is the insert of e in a claim's batch: written only if the
// claim took its key.
func IfClaimed(e Event) claim.Statement { return insertIfClaimed.With(args(e)...) }

// insertPlain is the insert of one event; its parameters are args'.
const insertPlain = `
		INSERT INTO outbox_events
		    (id, aggregate_type, aggregate_id, event_type, payload, created_at, next_attempt_at, traceparent)
		VALUES ($1, $2, $3, $4, $5, $6, $6, $7)`

// Beside the insert of one event rides its form over input rows (package
// rowset): the events of several requests' like batches may be written by
// one (package groupcommit). Its columns are args'.
var (
	eventColumns = []rowset.Column{
		{Name: "id", Type: "text"}, {Name: "aggregate_type", Type: "text"}, {Name: "aggregate_id", Type: "text"},
		{Name: "event_type", Type: "text"}, {Name: "payload", Type: "jsonb"}, {Name: "created_at", Type: "timestamptz"},
		{Name: "traceparent", Type: "text"},
	}
	insertSQL       = rowset.Paired(insertPlain, rowset.New(eventColumns, insert("true")))
	insertIfClaimed = claim.NewRows(insertPlain, eventColumns, insert)
)

// insert is the insert of the input rows' events where cond holds.
func insert(cond string) string {
	return `
		INSERT INTO outbox_events
		    (id, aggregate_type, aggregate_id, event_type, payload, created_at, next_attempt_at, traceparent)
		SELECT id::uuid, aggregate_type, aggregate_id, event_type, payload, created_at, created_at, traceparent
		FROM input
		WHERE ` + cond + `
		ORDER BY ord`
}

func args(e Event) []any {
	var traceparent *string // NULL when untraced
	if e.TraceParent != "" {
		traceparent = &e.TraceParent
	}
	return []any{e.ID, e.AggregateType, e.AggregateID, e.Type, e.Payload, e.OccurredAt, traceparent}
}

// DB is what the relay and its collaborators need of the database;
// *pgxpool.Pool has it. It has no Begin: each call is one transaction of
// its own (a batch one implicit transaction).
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}
