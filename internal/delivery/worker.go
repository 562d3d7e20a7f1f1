package delivery

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"
)

// ClaimSQL claims up to $2 messages due at $1 for the lease ending $5, at
// most $3 in flight per endpoint (those other claims hold count), visiting
// the endpoints with pending messages in id order after $4 (the worker
// goes round them pass after pass, so that each gets its turn however many
// there are). Each claim counts one more attempt and one more on the
// token, and makes the message due at the lease's end. A message of an
// endpoint disabled or deleted since it was written is abandoned instead
// (status abandoned comes back, and is not sent).
//
// What it reads: one entry of webhook_messages_due_idx per endpoint with
// pending messages (the recursive CTE skips from one endpoint to the next,
// whatever each one's backlog), the entries of that endpoint's messages in
// flight (webhook_messages_claimed_idx), and its due messages in order,
// stopping at the first not due yet or at its share; then the claimed rows,
// their events and endpoints by primary key. So a pass over a backlog of
// any size reads what it claims, plus one entry per endpoint it visits.
// The claimed ids, their events and their endpoints, are looked up again
// by primary key (= ANY of an array, not a join with the CTE), so that a
// plan, which cannot know that LIMIT $2 is small, does not hash the whole
// table to find them; for the events, an array is also what reaches into
// each branch of the log's relation (a join's condition would not). events is the event log as SQL (eventlog.Relation), where each
// message's event is read as merchants see it.
func ClaimSQL(events string) string {
	return `
		WITH RECURSIVE endpoints (id) AS (
		    (SELECT m.endpoint_id FROM webhook_messages m
		     WHERE m.status = 'pending' AND m.endpoint_id > $4
		     ORDER BY m.endpoint_id LIMIT 1)
		  UNION ALL
		    SELECT (SELECT m.endpoint_id FROM webhook_messages m
		            WHERE m.status = 'pending' AND m.endpoint_id > e.id
		            ORDER BY m.endpoint_id LIMIT 1)
		    FROM endpoints e WHERE e.id IS NOT NULL
		), picked AS (
		    SELECT d.id, e.id AS endpoint_id
		    FROM endpoints e
		    CROSS JOIN LATERAL (
		        SELECT count(*) AS n FROM webhook_messages f
		        WHERE f.endpoint_id = e.id AND f.status = 'pending' AND f.claimed_until IS NOT NULL
		          AND f.claimed_until > $1
		    ) busy
		    CROSS JOIN LATERAL (
		        SELECT m.id FROM webhook_messages m
		        WHERE m.endpoint_id = e.id AND m.status = 'pending' AND m.next_attempt_at <= $1
		        ORDER BY m.next_attempt_at
		        LIMIT greatest($3 - busy.n, 0)
		        FOR UPDATE SKIP LOCKED
		    ) d
		    WHERE e.id IS NOT NULL
		    LIMIT $2
		)
		UPDATE webhook_messages m
		SET token = m.token + 1, attempts = m.attempts + 1,
		    status = CASE WHEN w.status = 'enabled' AND w.deleted_at IS NULL THEN 'pending' ELSE 'abandoned' END,
		    claimed_until = CASE WHEN w.status = 'enabled' AND w.deleted_at IS NULL THEN $5::timestamptz END,
		    next_attempt_at = $5,
		    finished_at = CASE WHEN w.status = 'enabled' AND w.deleted_at IS NULL THEN NULL ELSE $1::timestamptz END
		FROM ` + events + ` ev, webhook_endpoints w
		WHERE m.id = ANY (ARRAY(SELECT id FROM picked)) AND ev.id = m.event_id
		  AND ev.id = ANY (ARRAY(SELECT c.event_id FROM webhook_messages c WHERE c.id = ANY (ARRAY(SELECT id FROM picked))))
		  AND w.id = ANY (ARRAY(SELECT endpoint_id FROM picked)) AND w.id = m.endpoint_id
		RETURNING m.id, m.token, m.status, m.attempts, ev.id::text, ev.type, ev.occurred_at, ev.data,
		    w.id, w.url, COALESCE(w.secret_sealed, ''),
		    CASE WHEN w.previous_secret_expires_at > $1 THEN COALESCE(w.previous_secret_sealed, '') ELSE '' END,
		    coalesce(ev.traceparent, '')`
}

// job is a message held by this worker's claim.
type job struct {
	messageID  int64
	token      int64
	attempt    int // of the current round, this one included
	eventID    string
	eventType  string
	occurredAt time.Time
	data       json.RawMessage
	endpointID string
	url        string
	// sealed and previousSealed are the endpoint's secret and the one a
	// rotation replaced, while it still signs ("": none), as stored
	// (package endpoints opens them). No sealed secret: the release before
	// migration 00043 wrote it in the clear (endpoints.Secrets).
	sealed, previousSealed string
	// traceparent is the trace context the event was published under ("":
	// untraced); its sends continue that trace.
	traceparent string
}

// claim claims up to limit due messages, and moves the cursor on.
func (w *Worker) claim(ctx context.Context, limit int) ([]job, error) {
	now := w.clock.Now()
	w.mu.Lock()
	after := w.cursor
	w.mu.Unlock()
	rows, err := w.db.Query(ctx, w.claimSQL, now, limit, w.cfg.PerEndpoint, after, now.Add(w.cfg.Lease))
	if err != nil {
		return nil, fmt.Errorf("claim webhook messages: %w", err)
	}
	defer rows.Close()
	var (
		jobs    []job
		claimed int
		last    string // the last endpoint of the claim
	)
	for rows.Next() {
		var (
			j      job
			status string
		)
		err := rows.Scan(&j.messageID, &j.token, &status, &j.attempt, &j.eventID, &j.eventType, &j.occurredAt, &j.data,
			&j.endpointID, &j.url, &j.sealed, &j.previousSealed, &j.traceparent)
		if err != nil {
			return nil, fmt.Errorf("claim webhook messages: %w", err)
		}
		claimed, last = claimed+1, max(last, j.endpointID)
		if status != "pending" {
			continue // abandoned: its endpoint was disabled or deleted
		}
		j.occurredAt = j.occurredAt.UTC()
		jobs = append(jobs, j)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("claim webhook messages: %w", err)
	}
	// A full claim may have left endpoints unvisited: the next starts after
	// the last one served. Otherwise it starts over.
	w.mu.Lock()
	w.cursor = ""
	if claimed >= limit {
		w.cursor = last
	}
	w.mu.Unlock()
	return jobs, nil
}

// RunOnce claims as many due messages as this worker has room for, sends
// them at once, and returns when every one is booked: how many it claimed.
func (w *Worker) RunOnce(ctx context.Context) (int, error) {
	var wg sync.WaitGroup
	n, err := w.start(ctx, &wg)
	wg.Wait()
	return n, err
}

// catchUp is how long Run waits, after a send ended, before it claims
// again: the sends that end together share one claim.
const catchUp = 10 * time.Millisecond

// Run sends due messages until ctx ends, then waits for the messages it is
// sending to be booked (each within Timeout). It claims every Interval, and
// soon after a send ends: that send's endpoint may take another message,
// so an endpoint with a backlog is sent its share continuously.
func (w *Worker) Run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		if _, err := w.start(ctx, &wg); err != nil && ctx.Err() == nil {
			w.log.ErrorContext(ctx, "webhook delivery pass failed", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(w.cfg.Interval):
		case <-w.freed:
			select {
			case <-ctx.Done():
				return
			case <-time.After(catchUp):
			}
		}
	}
}

// start claims as many due messages as there are free slots and starts
// sending each in a goroutine of its own, counted by wg. The sends outlive
// ctx: a send that began is booked, unless the process dies (then its lease
// runs out and another worker sends the message again).
func (w *Worker) start(ctx context.Context, wg *sync.WaitGroup) (int, error) {
	free := cap(w.slots) - len(w.slots)
	if free == 0 {
		return 0, nil
	}
	jobs, err := w.claim(ctx, free)
	for _, j := range jobs {
		w.slots <- struct{}{}
		wg.Go(func() {
			defer w.release()
			w.send(context.WithoutCancel(ctx), j)
		})
	}
	return len(jobs), err
}

func (w *Worker) release() {
	<-w.slots
	select {
	case w.freed <- struct{}{}:
	default:
	}
}
