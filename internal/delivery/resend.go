package delivery

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paymentsapi/paymentsapi/internal/claim"
	"github.com/paymentsapi/paymentsapi/internal/eventlog"
	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/ids"
	"github.com/paymentsapi/paymentsapi/internal/jsontext"
	"github.com/paymentsapi/paymentsapi/internal/operation"
	"github.com/paymentsapi/paymentsapi/internal/validate"
)

// The resend operation's name (its keys' scope) and the resource type its
// keys create.
const (
	OperationResend = "resend_event"
	ResendType      = "event_resend"
)

// The errors of a resend and of the delivery log.
var (
	ErrEventNotFound    = errors.New("event not found")
	ErrEndpointNotFound = errors.New("webhook endpoint not found")
	ErrEndpointDisabled = errors.New("the webhook endpoint is disabled: nothing is sent to it")
	// ErrEventNotResendable: the event is in the log only as the copy an
	// earlier release kept (package eventlog), which can be read and not
	// sent again; it leaves the log within EVENT_RETENTION.
	ErrEventNotResendable = errors.New("the event was logged before the outbox became the event log and is older than the outbox kept events then: it can be read, not sent again")
)

// ResendModule is resend_event as the service registers it (internal/app).
func ResendModule() operation.Module {
	return operation.Module{
		Name:     OperationResend,
		Resource: operation.Resource{Type: ResendType, IDField: "resendId"},
		New: func(env operation.Env) (operation.Instance, error) {
			return &Resends{env: env, events: eventlog.Relation(env.Modules)}, nil
		},
	}
}

// ResendRequest is the optional JSON body of POST /events/{eventId}/resend.
type ResendRequest struct {
	// EndpointID names the one endpoint to send the event to again; empty:
	// every enabled endpoint of the tenant that takes the event's type.
	EndpointID string `json:"endpointId"`
}

// Resend is what a resend_event key did: the event, sent again to those
// endpoints, now.
type Resend struct {
	ID          string   `json:"resendId"`
	EventID     string   `json:"eventId"`
	EndpointIDs []string `json:"endpointIds"`
}

// Outcome names a resend in the engine's metrics and logs.
func (Resend) Outcome() string { return "accepted" }

// Resends sends events again, idempotently, and reads their deliveries.
type Resends struct {
	env operation.Env
	// events is the event log as SQL (eventlog.Relation).
	events string
}

// Name is the operation's name in every key's scope.
func (s *Resends) Name() string { return OperationResend }

// Resend makes the tenant's event eventID due again, now, to the endpoints
// req names (see ResendRequest), under key: a message already delivered or
// failed starts a new round of attempts; one being sent is left to its
// attempt (which is the new round's first).
func (s *Resends) Resend(ctx context.Context, tenant, key, eventID string, req ResendRequest, wait time.Duration) (idempotency.Reply, error) {
	if !validate.StorableText(req.EndpointID) {
		var errs validate.Collector
		errs.Add("endpointId", "must be a webhook endpoint's id")
		return idempotency.Reply{}, errs.Err()
	}
	targets, err := resendTargets(ctx, s.env.DB, s.events, tenant, eventID, req.EndpointID)
	if err != nil {
		return idempotency.Reply{}, err
	}
	r := Resend{ID: ids.New("evr_"), EventID: eventID, EndpointIDs: targets}
	fingerprint := sha256.Sum256(jsontext.Array(OperationResend, eventID, req.EndpointID))
	now := s.env.Clock.Now()
	return s.env.Engine.Do(ctx, s, idempotency.Request{
		Scope:       idempotency.Scope{Tenant: tenant, Operation: OperationResend, Key: key},
		Fingerprint: fingerprint[:],
		Resource:    idempotency.Resource{Type: ResendType, ID: r.ID},
		Create: func(b *claim.Batch) {
			b.Queue(claim.Gated(func(claimed string) string {
				return `
				WITH resend AS (
				    INSERT INTO webhook_resends (id, tenant_id, event_id, endpoint_ids, created_at)
				    SELECT $1, $2, $3::uuid, $4, $5 WHERE ` + claimed + `
				)
				INSERT INTO webhook_messages AS m (event_id, endpoint_id, status, next_attempt_at, pending_since)
				SELECT $3::uuid, e, 'pending', $5, $5 FROM unnest($4::text[]) AS e WHERE ` + claimed + `
				ON CONFLICT (event_id, endpoint_id) DO UPDATE
				SET status = 'pending', attempts = 0, finished_at = NULL,
				    next_attempt_at = CASE WHEN m.status = 'pending' AND m.claimed_until > $5 THEN m.next_attempt_at ELSE $5 END,
				    claimed_until = CASE WHEN m.status = 'pending' AND m.claimed_until > $5 THEN m.claimed_until END,
				    pending_since = CASE WHEN m.status = 'pending' THEN m.pending_since ELSE $5 END`
			}, r.ID, tenant, eventID, r.EndpointIDs, now))
		},
		Created: r,
		Wait:    wait,
	})
}

// resendTargets returns the endpoints a resend of the tenant's event sends
// to: the one named, which must be the tenant's and enabled, or every
// enabled endpoint of the tenant that takes the event's type.
func resendTargets(ctx context.Context, db *pgxpool.Pool, events, tenant, eventID, endpointID string) ([]string, error) {
	if !ids.IsUUID(eventID) {
		return nil, ErrEventNotFound
	}
	rows, err := db.Query(ctx, `
		SELECT w.id, w.status = 'enabled', true
		FROM `+events+` ev
		JOIN webhook_endpoints w ON w.tenant_id = ev.tenant_id AND w.deleted_at IS NULL
		    AND CASE WHEN $3 = '' THEN w.status = 'enabled' AND (w.event_types IS NULL OR ev.type = ANY (w.event_types))
		             ELSE w.id = $3 END
		WHERE ev.id = $1::uuid AND ev.tenant_id = $2
		UNION ALL
		SELECT NULL, NULL, EXISTS (SELECT FROM outbox_events o WHERE o.id = $1::uuid)
		FROM `+events+` ev WHERE id = $1::uuid AND tenant_id = $2
		ORDER BY 1`, eventID, tenant, endpointID)
	if err != nil {
		return nil, fmt.Errorf("read the endpoints of a resend: %w", err)
	}
	type target struct {
		ID       *string
		Enabled  *bool
		InOutbox bool
	}
	found, err := pgx.CollectRows(rows, pgx.RowToStructByPos[target])
	if err != nil {
		return nil, fmt.Errorf("read the endpoints of a resend: %w", err)
	}
	// The row with NULLs says the event is the tenant's, and whether the
	// outbox holds it; the others are the endpoints.
	out := []string{}
	for _, t := range found {
		switch {
		case t.ID == nil && !t.InOutbox:
			return nil, ErrEventNotResendable
		case t.ID == nil:
		case !*t.Enabled:
			return nil, ErrEndpointDisabled
		default:
			out = append(out, *t.ID)
		}
	}
	switch {
	case len(found) == 0:
		return nil, ErrEventNotFound
	case endpointID != "" && len(out) == 0:
		return nil, ErrEndpointNotFound
	}
	return out, nil
}

// Resume stores the answer of a key whose resend its claim wrote: as
// written (the first request) or as read back (a takeover).
func (s *Resends) Resume(ctx context.Context, own *idempotency.Owner) (idempotency.Result, error) {
	r, ok := own.Created.(Resend)
	if !ok {
		rows, err := s.env.DB.Query(ctx, `SELECT id, event_id::text, endpoint_ids FROM webhook_resends
			WHERE id = $1 AND tenant_id = $2`, own.Resource.ID, own.Tenant)
		if err != nil {
			return nil, fmt.Errorf("read a resend: %w", err)
		}
		if r, err = pgx.CollectExactlyOneRow(rows, pgx.RowToStructByPos[Resend]); err != nil {
			return nil, fmt.Errorf("read a resend: %w", err)
		}
	}
	b := &pgx.Batch{}
	if err := own.QueueFinish(b, r); err != nil {
		return nil, err
	}
	if err := own.Commit(ctx, b); err != nil {
		return nil, err
	}
	return r, nil
}

// Attempt is one attempt of the delivery log (GET /events/{eventId}/deliveries).
type Attempt struct {
	EndpointID    string     `json:"endpointId"`
	AttemptedAt   time.Time  `json:"attemptedAt"`
	StatusCode    *int       `json:"statusCode"`    // null: no HTTP answer
	DurationMs    int64      `json:"durationMs"`    //
	Error         *string    `json:"error"`         // null when delivered
	NextAttemptAt *time.Time `json:"nextAttemptAt"` // null when none follows
}

// Attempts returns every attempt to deliver the tenant's event eventID, to
// every endpoint, newest first; ErrEventNotFound when there is no such
// event. An attempt's next one is not shown when its endpoint was disabled
// or deleted before it was due: it will not happen.
func (s *Resends) Attempts(ctx context.Context, tenant, eventID string) ([]Attempt, error) {
	if !ids.IsUUID(eventID) {
		return nil, ErrEventNotFound
	}
	rows, err := s.env.DB.Query(ctx, `
		SELECT m.endpoint_id, a.attempted_at, a.status_code, a.duration_ms::bigint, a.error,
		       CASE WHEN m.status = 'abandoned' AND a.next_attempt_at > m.finished_at THEN NULL ELSE a.next_attempt_at END
		FROM `+s.events+` ev
		JOIN webhook_messages m ON m.event_id = ev.id
		JOIN webhook_attempts a ON a.message_id = m.id
		WHERE ev.id = $1::uuid AND ev.tenant_id = $2
		UNION ALL
		SELECT NULL, NULL, NULL, NULL, NULL, NULL FROM `+s.events+` ev WHERE id = $1::uuid AND tenant_id = $2
		ORDER BY 2 DESC NULLS LAST, 1`, eventID, tenant)
	if err != nil {
		return nil, fmt.Errorf("read the deliveries of an event: %w", err)
	}
	type row struct {
		EndpointID    *string
		AttemptedAt   *time.Time
		StatusCode    *int
		DurationMs    *int64
		Error         *string
		NextAttemptAt *time.Time
	}
	found, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	if err != nil {
		return nil, fmt.Errorf("read the deliveries of an event: %w", err)
	}
	if len(found) == 0 {
		return nil, ErrEventNotFound
	}
	out := []Attempt{}
	for _, r := range found {
		if r.EndpointID == nil {
			continue // the row that says the event is the tenant's
		}
		a := Attempt{EndpointID: *r.EndpointID, AttemptedAt: r.AttemptedAt.UTC(), StatusCode: r.StatusCode,
			DurationMs: *r.DurationMs, Error: r.Error}
		if r.NextAttemptAt != nil {
			next := r.NextAttemptAt.UTC()
			a.NextAttemptAt = &next
		}
		out = append(out, a)
	}
	return out, nil
}
