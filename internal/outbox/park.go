package outbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/paymentsapi/paymentsapi/internal/audit"
)

// This file holds parking (see Sender): the events set aside in
// outbox_parked (migration 00032), and their release.

// ErrNotParked is returned by Unpark for an event that is not parked.
var ErrNotParked = errors.New("outbox event is not parked")

// MaxErrorLength bounds the last error kept on a parked event, in bytes.
const MaxErrorLength = 2000

// loadHeld reads the aggregates that have parked events, each with the
// event its later ones wait behind (the earliest failed one).
func loadHeld(ctx context.Context, db DB) (map[aggregate]string, error) {
	rows, err := db.Query(ctx, `
		SELECT DISTINCT ON (aggregate_type, aggregate_id) aggregate_type, aggregate_id, event_id::text
		FROM outbox_parked
		ORDER BY aggregate_type, aggregate_id, seq`)
	if err != nil {
		return nil, fmt.Errorf("read the parked outbox events: %w", err)
	}
	held := map[aggregate]string{}
	var a aggregate
	var id string
	_, err = pgx.ForEachRow(rows, []any{&a.typ, &a.id, &id}, func() error {
		held[a] = id
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the parked outbox events: %w", err)
	}
	return held, nil
}

// park sets e aside: failed after attempts, with cause, or, with waitsFor,
// behind that parked event of its aggregate. Its aggregate's later events
// are parked behind it from now on. A failed event parked again (failing
// again after its release) gets its new record, no longer released; an
// event parked behind another that is sent again (after a restart, or in a
// catch-up) keeps the record it has, and its release if an operator gave
// one.
func (s *Sender) park(ctx context.Context, e Event, attempts int, cause, waitsFor string) error {
	if len(cause) > MaxErrorLength {
		cause = strings.ToValidUTF8(cause[:MaxErrorLength], "") // not a rune cut in two
	}
	onConflict := `DO UPDATE
		SET attempts = EXCLUDED.attempts, last_error = EXCLUDED.last_error, waits_for = NULL,
		    parked_at = EXCLUDED.parked_at, released_at = NULL`
	if waitsFor != "" {
		onConflict = `DO NOTHING`
	}
	var n int
	qctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	err := s.db.QueryRow(qctx, `
		WITH parked AS (
		    INSERT INTO outbox_parked (event_id, aggregate_type, aggregate_id, seq, attempts, last_error, waits_for, parked_at)
		    SELECT id, aggregate_type, aggregate_id, seq, $2, NULLIF($3, ''), NULLIF($4, '')::uuid, $5
		    FROM outbox_events WHERE id = $1
		    ON CONFLICT (event_id) `+onConflict+`
		    RETURNING 1)
		SELECT (SELECT count(*) FROM parked) + (SELECT count(*) FROM outbox_parked WHERE event_id = $1)`,
		e.ID, attempts, cause, waitsFor, s.clock.Now()).Scan(&n)
	if err != nil {
		return fmt.Errorf("park outbox event %s: %w", e.ID, err)
	}
	if n == 0 { // no such event: nothing would remember it
		return fmt.Errorf("park outbox event %s: it is not in the outbox", e.ID)
	}
	a := aggregateOf(e)
	if _, ok := s.held[a]; !ok {
		s.held[a] = e.ID
	}
	log := s.log.With("event_id", e.ID, "event_type", e.Type, "aggregate_id", e.AggregateID)
	if waitsFor != "" {
		log.WarnContext(ctx, "outbox event parked behind an earlier parked event of its aggregate", "waits_for", waitsFor)
		return nil
	}
	s.metrics.CountParked()
	log.ErrorContext(ctx, "outbox event parked: the relay gave up on it; later events of its aggregate wait for it (unpark it once the cause is fixed)",
		"attempts", attempts, "error", cause)
	return nil
}

// Release publishes the parked events of every aggregate an operator
// released, all of them in seq order (those parked behind the released
// ones since, too), and forgets each once it is published. One that fails
// again is parked again, with those after it.
func (s *Sender) Release(ctx context.Context) error {
	s.checked = s.clock.Now()
	qctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	rows, err := s.db.Query(qctx, `
		SELECT p.event_id::text, p.aggregate_type, p.aggregate_id
		FROM outbox_parked p
		WHERE EXISTS (SELECT FROM outbox_parked q
		              WHERE q.aggregate_type = p.aggregate_type AND q.aggregate_id = p.aggregate_id
		                AND q.released_at IS NOT NULL)
		ORDER BY p.aggregate_type, p.aggregate_id, p.seq`)
	if err != nil {
		return fmt.Errorf("look for released outbox events: %w", err)
	}
	type parked struct {
		id string
		a  aggregate
	}
	var found []parked
	var p parked
	if _, err := pgx.ForEachRow(rows, []any{&p.id, &p.a.typ, &p.a.id}, func() error {
		found = append(found, p)
		return nil
	}); err != nil {
		return fmt.Errorf("look for released outbox events: %w", err)
	}
	for len(found) > 0 {
		n := 1
		for n < len(found) && found[n].a == found[0].a {
			n++
		}
		ids := make([]string, n)
		for i := range n {
			ids[i] = found[i].id
		}
		a := found[0].a
		found = found[n:]
		if err := s.releaseAggregate(ctx, a, ids); err != nil {
			return err
		}
	}
	return nil
}

func (s *Sender) releaseAggregate(ctx context.Context, a aggregate, ids []string) error {
	events, err := Load(ctx, s.db, ids)
	if err != nil {
		return err
	}
	delete(s.held, a)
	s.log.InfoContext(ctx, "outbox: publishing released events", "aggregate_id", a.id, "events", len(events))
	for _, e := range events {
		delete(s.attempts, e.ID) // sent round again: its attempts start over
		parked, err := s.sendWave(ctx, []Event{e})
		if err != nil {
			return err
		}
		qctx, cancel := context.WithTimeout(ctx, queryTimeout)
		defer cancel()
		if parked > 0 { // failed again: it and the rest wait for the next release
			_, err := s.db.Exec(qctx, `
				UPDATE outbox_parked SET released_at = NULL,
				    waits_for = CASE WHEN event_id = $3 THEN NULL ELSE $3::uuid END
				WHERE aggregate_type = $1 AND aggregate_id = $2`, a.typ, a.id, e.ID)
			if err != nil {
				return fmt.Errorf("park released outbox events again: %w", err)
			}
			return nil
		}
		if _, err := s.db.Exec(qctx, `DELETE FROM outbox_parked WHERE event_id = $1`, e.ID); err != nil {
			return fmt.Errorf("forget released outbox event %s: %w", e.ID, err)
		}
	}
	return nil
}

// Unpark releases the parked event eventID and the other parked events of
// its aggregate: a running relay publishes them all, in order, within
// ReleaseInterval. It returns ErrNotParked if eventID is not parked.
func Unpark(ctx context.Context, db DB, eventID string, now time.Time) error {
	tag, err := db.Exec(ctx, `
		UPDATE outbox_parked SET released_at = $2
		WHERE (aggregate_type, aggregate_id) IN (SELECT aggregate_type, aggregate_id FROM outbox_parked WHERE event_id = $1)`,
		eventID, now)
	if err != nil {
		return fmt.Errorf("unpark outbox event %s: %w", eventID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: %s", ErrNotParked, eventID)
	}
	return nil
}

// UnparkAudited is Unpark with its record in the audit log
// (AuditUnparked, by the context's actor), in one transaction: an
// operator's unpark of one event from the dashboard.
func UnparkAudited(ctx context.Context, db interface {
	Begin(context.Context) (pgx.Tx, error)
}, eventID string, now time.Time) error {
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if err := Unpark(ctx, tx, eventID, now); err != nil {
			return err
		}
		return audit.Record(ctx, tx, now, audit.Change{Action: AuditUnparked,
			Details: map[string]any{"eventIds": []string{eventID}, "count": 1}})
	})
}

// UnparkAll releases every parked event and returns how many.
func UnparkAll(ctx context.Context, db DB, now time.Time) (int64, error) {
	tag, err := db.Exec(ctx, `UPDATE outbox_parked SET released_at = $1 WHERE released_at IS NULL`, now)
	if err != nil {
		return 0, fmt.Errorf("unpark outbox events: %w", err)
	}
	return tag.RowsAffected(), nil
}

// ParkedEvent is a parked event as an operator sees it: one that failed
// (LastError) or one waiting behind it (WaitsFor).
type ParkedEvent struct {
	Event
	Attempts  int       `json:"attempts"`
	ParkedAt  time.Time `json:"parkedAt"`
	LastError string    `json:"lastError,omitempty"`
	WaitsFor  string    `json:"waitsFor,omitempty"`
	// Released: an operator unparked it, and the relay has not published
	// it yet.
	Released bool `json:"released"`
}

// Parked returns up to limit parked events, the earliest parked first, in
// order within each aggregate.
func Parked(ctx context.Context, db DB, limit int) ([]ParkedEvent, error) {
	rows, err := db.Query(ctx, `
		SELECT o.id::text, o.event_type, o.aggregate_type, o.aggregate_id, o.created_at, o.payload,
		       p.attempts, p.parked_at, coalesce(p.last_error, ''), coalesce(p.waits_for::text, ''), p.released_at IS NOT NULL
		FROM outbox_parked p JOIN outbox_events o ON o.id = p.event_id
		ORDER BY p.parked_at, p.seq
		LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("list parked outbox events: %w", err)
	}
	parked, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ParkedEvent, error) {
		var p ParkedEvent
		err := row.Scan(&p.ID, &p.Type, &p.AggregateType, &p.AggregateID, &p.OccurredAt, (*[]byte)(&p.Payload),
			&p.Attempts, &p.ParkedAt, &p.LastError, &p.WaitsFor, &p.Released)
		p.OccurredAt, p.ParkedAt = p.OccurredAt.UTC(), p.ParkedAt.UTC()
		return p, err
	})
	if err != nil {
		return nil, fmt.Errorf("list parked outbox events: %w", err)
	}
	return parked, nil
}
