// Package audit is the audit log of what changes who may do what, rather
// than money: API keys created, added and revoked, webhook endpoints
// created, rotated and deleted, and operators' actions. Each event names
// its actor and request id as package actor carries them. The log is
// append-only: the table's trigger refuses UPDATE, DELETE and TRUNCATE
// (migration 00044), so the service's own role cannot rewrite it.
//
// Money's moves are audited apart, each with its row's move: every state
// machine's transitions table (package statemachine).
package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/paymentsapi/paymentsapi/internal/actor"
	"github.com/paymentsapi/paymentsapi/internal/claim"
	"github.com/paymentsapi/paymentsapi/internal/cursor"
	"github.com/paymentsapi/paymentsapi/internal/ids"
)

// The actions are named by the code that records them (apikeys,
// endpoints, outbox, the operator commands), as "<resource>.<what
// happened>": this package only keeps the log.

// ErrNoActor: the context names nobody to record (a programming error:
// whoever starts work sets its actor, package actor).
var ErrNoActor = errors.New("audit: the context names no actor")

// ErrInvalidCursor: the cursor was not produced by this API.
var ErrInvalidCursor = errors.New("invalid cursor")

// Event is one entry of the log.
type Event struct {
	ID         string         `json:"id"`
	OccurredAt time.Time      `json:"occurredAt"`
	Actor      string         `json:"actor"`
	RequestID  string         `json:"requestId,omitempty"`
	Action     string         `json:"action"`
	TenantID   string         `json:"tenantId,omitempty"`
	TargetID   string         `json:"targetId,omitempty"`
	Details    map[string]any `json:"details"`
}

// Change is what an event says was done, on what: the rest (who, under
// which request, when) is the context's and the clock's.
type Change struct {
	Action   string
	TenantID string // "" for what belongs to no tenant
	TargetID string // the key, endpoint, event... acted on
	Details  map[string]any
}

// Execer is what Record needs from a pool or a transaction.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

const insert = `INSERT INTO audit_events (id, occurred_at, actor, request_id, action, tenant_id, target_id, details)`

// Record appends c, made by ctx's actor at now, to the log.
func Record(ctx context.Context, db Execer, now time.Time, c Change) error {
	if actor.From(ctx).Actor == "" {
		return fmt.Errorf("%w: %s", ErrNoActor, c.Action)
	}
	args, err := values(ctx, now, c)
	if err != nil {
		return err
	}
	if _, err := db.Exec(ctx, insert+` VALUES ($1::uuid, $2, $3, $4, $5, $6, $7, $8::jsonb)`, args...); err != nil {
		return fmt.Errorf("record audit event %s: %w", c.Action, err)
	}
	return nil
}

// Queue adds c, made by ctx's actor at now, to b: the event commits with
// the change queued beside it, or not at all (an operator's resolution of
// a key, with the resource's move).
func Queue(ctx context.Context, b *pgx.Batch, now time.Time, c Change) error {
	if actor.From(ctx).Actor == "" {
		return fmt.Errorf("%w: %s", ErrNoActor, c.Action)
	}
	args, err := values(ctx, now, c)
	if err != nil {
		return err
	}
	b.Queue(insert+` VALUES ($1::uuid, $2, $3, $4, $5, $6, $7, $8::jsonb)`, args...)
	return nil
}

// Claimed is Record in a claim's batch (package claim): the event is
// written with what the claim creates, only if the claim took its key, so
// that a retry answered from the key's memory records nothing again. A
// context that names no actor makes the statement fail (the column is NOT
// NULL), and the claim's transaction with it, as Record refuses.
func Claimed(ctx context.Context, now time.Time, c Change) claim.Statement {
	args, err := values(ctx, now, c)
	if err != nil {
		panic(err) // details that do not marshal are a programming error
	}
	return claimed.With(args...)
}

var claimed = claim.NewTemplate(func(claimed string) string {
	return insert + ` SELECT $1::uuid, $2::timestamptz, $3::text, $4::text, $5::text, $6::text, $7::text, $8::jsonb WHERE ` + claimed
})

// values are an event's columns, in insert's order (the actor NULL where
// ctx names none).
func values(ctx context.Context, now time.Time, c Change) ([]any, error) {
	who := actor.From(ctx)
	details := c.Details
	if details == nil {
		details = map[string]any{}
	}
	raw, err := json.Marshal(details)
	if err != nil {
		return nil, fmt.Errorf("audit event %s: details: %w", c.Action, err)
	}
	return []any{ids.NewEventID(now), now, nullIfEmpty(who.Actor), nullIfEmpty(who.RequestID), c.Action,
		nullIfEmpty(c.TenantID), nullIfEmpty(c.TargetID), string(raw)}, nil
}

func nullIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// Querier is what List needs from a pool.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Query selects a page of the log, newest first.
type Query struct {
	Tenant string // optional: one tenant's events only
	Action string // optional: one action only
	Limit  int
	Cursor string // from a previous Page
}

// Page is one page of the log.
type Page struct {
	Items      []Event `json:"items"`
	NextCursor string  `json:"nextCursor,omitempty"`
}

// List returns a page of the log, newest first.
func List(ctx context.Context, db Querier, q Query) (Page, error) {
	where, args := []string{"true"}, []any{}
	if q.Tenant != "" {
		args = append(args, q.Tenant)
		where = append(where, fmt.Sprintf("tenant_id = $%d", len(args)))
	}
	if q.Action != "" {
		args = append(args, q.Action)
		where = append(where, fmt.Sprintf("action = $%d", len(args)))
	}
	if q.Cursor != "" {
		at, id, err := cursor.Decode(q.Cursor, ids.IsUUID)
		if err != nil {
			return Page{}, ErrInvalidCursor
		}
		args = append(args, at, id)
		where = append(where, fmt.Sprintf("(occurred_at, id) < ($%d, $%d::uuid)", len(args)-1, len(args)))
	}
	args = append(args, q.Limit+1)
	rows, err := db.Query(ctx, `
		SELECT id::text, occurred_at, actor, coalesce(request_id, ''), action, coalesce(tenant_id, ''),
		       coalesce(target_id, ''), details
		FROM audit_events WHERE `+strings.Join(where, " AND ")+`
		ORDER BY occurred_at DESC, id DESC LIMIT $`+fmt.Sprint(len(args)), args...)
	if err != nil {
		return Page{}, fmt.Errorf("list audit events: %w", err)
	}
	items, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Event, error) {
		var e Event
		err := r.Scan(&e.ID, &e.OccurredAt, &e.Actor, &e.RequestID, &e.Action, &e.TenantID, &e.TargetID, &e.Details)
		e.OccurredAt = e.OccurredAt.UTC()
		return e, err
	})
	if err != nil {
		return Page{}, fmt.Errorf("list audit events: %w", err)
	}
	page := Page{Items: items}
	if len(items) > q.Limit {
		page.Items = items[:q.Limit]
		last := page.Items[q.Limit-1]
		page.NextCursor = cursor.Encode(last.OccurredAt, last.ID)
	}
	if page.Items == nil {
		page.Items = []Event{}
	}
	return page, nil
}
