package stream

import (
	"strconv"
	"time"
)

// CatchupMargin is how far before the recorded position a catch-up starts
// (see Relay): longer than a transaction lasts between writing an event and
// committing, plus any skew between the service's clock (an event's
// created_at) and the database's (commit times). Clean-up keeps what a
// catch-up could need by the same margin.
const CatchupMargin = 5 * time.Minute

// DeleteStreamed is the outbox's clean-up under the stream's relay, in the
// shape of package cleanup's statements: it deletes at most $2 events
// created before $1 (OUTBOX_RETENTION's cutoff), oldest first. Nothing on a
// row says it was published, so it also keeps every event a catch-up could
// still need: those created since CatchupMargin before the oldest recorded
// position, and all of them while no position is recorded (LEAST would
// skip a missing one: hence the -infinity). Parked events
// stay until they are released and published.
//
// Event ids are UUIDv7s, in creation order: the primary key is walked from
// its start up to the first id of the bound's millisecond, so a run reads
// only events old enough to go (and the parked ones among them), however
// many younger ones the table holds.
var DeleteStreamed = `
		WITH bound AS (
		    SELECT LEAST($1::timestamptz, COALESCE(
		               (SELECT min(committed_at) FROM outbox_stream_positions)
		               - ` + strconv.FormatInt(CatchupMargin.Microseconds(), 10) + ` * interval '1 microsecond',
		               '-infinity')) AS at
		), first_id AS (
		    SELECT CASE WHEN at = '-infinity' THEN '00000000-0000-0000-0000-000000000000'::uuid
		                ELSE (SELECT (substr(h, 1, 8) || '-' || substr(h, 9, 4) || '-0000-0000-000000000000')::uuid
		                      FROM (SELECT lpad(to_hex(floor(extract(epoch FROM at) * 1000)::bigint), 12, '0') AS h) x)
		           END AS id
		    FROM bound
		)
		DELETE FROM outbox_events
		WHERE id = ANY(ARRAY(
		    SELECT e.id FROM outbox_events e
		    WHERE e.id < (SELECT id FROM first_id)
		      AND e.created_at <= (SELECT at FROM bound)
		      AND NOT EXISTS (SELECT FROM outbox_parked p WHERE p.event_id = e.id)
		    ORDER BY e.id
		    LIMIT $2))`
