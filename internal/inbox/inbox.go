// Package inbox holds the statements on the inbox table: one row per event a
// consumer has handled, primary key (consumer, event_id), so that a
// redelivered event is recognised and changes nothing. Its consumers are
// the ledger (internal/ledger, events of our outbox) and the Stripe webhooks
// (internal/webhooks, consumer "stripe-webhooks").
package inbox

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Querier is a connection, pool or transaction.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Entry is one handled event.
type Entry struct {
	Consumer    string
	EventID     string // a UUID
	EventType   string
	AggregateID string // what the event is about
	// Outcome is applied, duplicate_entry, ignored or rejected (the
	// table's CHECK).
	Outcome string
	// Error says why a rejected event was rejected, for a person; "" for
	// none.
	Error      string
	ReceivedAt time.Time
}

// Record inserts e; false, without error, when the consumer already has
// the event.
func Record(ctx context.Context, q Querier, e Entry) (bool, error) {
	var reason *string
	if e.Error != "" {
		reason = &e.Error
	}
	tag, err := q.Exec(ctx, `
		INSERT INTO inbox (consumer, event_id, event_type, aggregate_id, outcome, error, received_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7)
		ON CONFLICT (consumer, event_id) DO NOTHING`,
		e.Consumer, e.EventID, e.EventType, e.AggregateID, e.Outcome, reason, e.ReceivedAt)
	if err != nil {
		return false, fmt.Errorf("record event %s in the inbox: %w", e.EventID, err)
	}
	return tag.RowsAffected() == 1, nil
}

// SetOutcome changes the outcome recorded for the consumer's event.
func SetOutcome(ctx context.Context, q Querier, consumer, eventID, outcome string) error {
	if _, err := q.Exec(ctx, `UPDATE inbox SET outcome = $3 WHERE consumer = $1 AND event_id = $2`,
		consumer, eventID, outcome); err != nil {
		return fmt.Errorf("record event %s in the inbox: %w", eventID, err)
	}
	return nil
}

// Has reports whether the consumer already has the event.
func Has(ctx context.Context, q Querier, consumer, eventID string) (bool, error) {
	var seen bool
	err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM inbox WHERE consumer = $1 AND event_id = $2)`,
		consumer, eventID).Scan(&seen)
	if err != nil {
		return false, fmt.Errorf("look event %s up in the inbox: %w", eventID, err)
	}
	return seen, nil
}

// DeleteReceived is the inbox's clean-up, run by package cleanup: it
// deletes at most $2 rows received before $1 (INBOX_RETENTION), never a
// rejected one (a person resolves those). Rows, whose key has two columns,
// are found by their ctid, which cannot change while the statement holds
// their lock; they are taken oldest first, an order that makes even a
// generic plan, which cannot know how few rows are past $1, walk the index
// rather than the table.
const DeleteReceived = `
		DELETE FROM inbox
		WHERE ctid = ANY(ARRAY(
		    SELECT ctid FROM inbox
		    WHERE outcome <> 'rejected' AND received_at <= $1
		    ORDER BY received_at
		    LIMIT $2 FOR UPDATE SKIP LOCKED))`
