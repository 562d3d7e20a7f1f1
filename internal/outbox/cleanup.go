package outbox

import (
	"strconv"
	"time"
)

// CatchupMargin is how far before a reader's recorded position in time a
// catch-up starts (the stream's, after its slot was created again; the
// poller's first): longer than a transaction lasts between writing an
// event and committing, plus any skew between the service's clock (an
// event's created_at) and the database's (commit times). Clean-up keeps
// what a catch-up could need by the same margin.
const CatchupMargin = 5 * time.Minute

// DeletePublished is the outbox's clean-up, in the shape of package
// cleanup's statements: it deletes at most $2 events created before $1
// (OUTBOX_RETENTION's cutoff), oldest first, keeping every event a reader
// with a recorded position could still have to publish:
//
//   - the stream (package outbox/stream): nothing on a row says it was
//     published, so it keeps those created since CatchupMargin before the
//     oldest recorded stream position (LEAST would skip a missing one:
//     hence the -infinity);
//   - the poller (package outbox/poll): those after its position, in its
//     order (order_xid, then seq; those without an order_xid are older
//     than its first position).
//
// With no position recorded at all, nothing has been published yet that a
// reader will not publish again: every event stays. Parked events stay
// until they are released and published. A reader no longer run keeps its
// position, and holds clean-up back, until an operator deletes it (as an
// abandoned replication slot holds the server's WAL).
//
// Event ids are UUIDv7s, in creation order: the primary key is walked from
// its start up to the first id of the bound's millisecond, so a run reads
// only events old enough to go (and the parked ones among them), however
// many younger ones the table holds.
var DeletePublished = `
		WITH bound AS (
		    SELECT LEAST($1::timestamptz, CASE
		        WHEN EXISTS (SELECT FROM outbox_stream_positions) THEN COALESCE(
		               (SELECT min(committed_at) FROM outbox_stream_positions)
		               - ` + strconv.FormatInt(CatchupMargin.Microseconds(), 10) + ` * interval '1 microsecond',
		               '-infinity')
		        WHEN EXISTS (SELECT FROM outbox_poll_position) THEN 'infinity'
		        ELSE '-infinity' END) AS at
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
		      AND NOT EXISTS (SELECT FROM outbox_poll_position p WHERE (e.order_xid, e.seq) > (p.order_xid, p.seq))
		    ORDER BY e.id
		    LIMIT $2))`
