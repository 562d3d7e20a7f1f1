package stream

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/paymentsapi/paymentsapi/internal/outbox"
)

// replayPrefix names Replay's logical decoding messages.
const replayPrefix = "paymentsapi.outbox.replay"

// Replay asks the relay to publish the events ids again, and returns those
// it could not ask for because the outbox no longer holds them (cleaned up
// after OUTBOX_RETENTION, or never written). It is an operator's tool: a
// consumer that refused an event fixed, the event is delivered once more
// (consumers deduplicate by event id, so one that took it already ignores
// it).
//
// Nothing on the events changes: Replay commits one transactional logical
// decoding message per event, and the relay, reading them in its stream in
// commit order, reads those events from the table and publishes them as it
// publishes new ones: after the events committed before the replay, a
// payment's in the order they were written, behind a parked event of their
// payment if there is one. A replay committed while the relay's slot is being created again
// (after a failover) is lost with the old slot: replay again then.
func Replay(ctx context.Context, db outbox.DB, ids []string) (missing []string, err error) {
	// One statement, one transaction: the messages of the events found,
	// in the order given (unnest's).
	rows, err := db.Query(ctx, `
		SELECT i FROM (
		    SELECT i, pg_logical_emit_message(true, $2, i) FROM unnest($1::text[]) AS x(i)
		    WHERE EXISTS (SELECT FROM outbox_events WHERE id = i::uuid)) asked`, ids, replayPrefix)
	if err != nil {
		return nil, fmt.Errorf("outbox stream: replay: %w", err)
	}
	asked, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("outbox stream: replay: %w", err)
	}
	for _, id := range ids {
		if !slices.Contains(asked, id) {
			missing = append(missing, id)
		}
	}
	return missing, nil
}
