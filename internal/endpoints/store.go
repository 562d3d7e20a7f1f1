package endpoints

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paymentsapi/paymentsapi/internal/claim"
	"github.com/paymentsapi/paymentsapi/internal/refuse"
)

// This file holds every statement of the endpoints package on
// webhook_endpoints (and, for a deleted endpoint, on its pending messages).

// The refusals of the claims' statements: the endpoint is not the
// tenant's, or was deleted, between the handler's read and the claim
// (queueRotate); the tenant has MaxPerTenant endpoints already
// (queueInsert).
const (
	refuseNotFound refuse.Code = "PA120"
	refuseTooMany  refuse.Code = "PA121"
)

// queueInsert adds to b the insert of e, with its sealed secret, if the
// claim took its key, refused (refuseTooMany) when the tenant has
// MaxPerTenant endpoints already. The count holds under concurrent creates:
// the first statement takes a lock of the tenant's endpoints until the
// claim's transaction ends, and the second, which counts, starts after it
// got it, so it sees every endpoint an earlier holder committed. The lock
// is a transaction-level advisory lock on the tenant's name (there is no
// row of the tenant to lock); a delete needs none, since it only lowers
// the count.
func queueInsert(b *claim.Batch, e Endpoint) {
	b.Queue(claim.Gated(func(claimed string) string {
		return `SELECT pg_advisory_xact_lock(hashtextextended('webhook_endpoints:' || $1::text, 0)) WHERE ` + claimed
	}, e.TenantID))
	b.Queue(claim.Gated(func(claimed string) string {
		return `
		WITH inserted AS (
		    INSERT INTO webhook_endpoints (id, tenant_id, url, event_types, description, status, secret_sealed, secret_id, created_at)
		    SELECT $1, $2, $3, $4, $5, $6, $7, $1, $8
		    WHERE ` + claimed + ` AND (SELECT count(*) FROM webhook_endpoints
		                               WHERE tenant_id = $2 AND deleted_at IS NULL) < $9
		    RETURNING id
		)
		SELECT ` + refuse.Unless(claim.Implies(claimed, "EXISTS (SELECT FROM inserted)"), refuseTooMany, "'too many webhook endpoints'", "")
	}, e.ID, e.TenantID, e.URL, e.EventTypes, e.Description, string(e.Status), e.sealed, e.CreatedAt, MaxPerTenant))
}

// queueRotate adds to b, if the claim took its key, the rotation of the
// tenant's endpoint to sealed (its new secret, sealed), set by rotationID:
// the current secret goes on signing until expires. The batch refuses
// (refuseNotFound) if there is no such endpoint.
func queueRotate(b *claim.Batch, tenant, endpointID, rotationID, sealed string, expires time.Time) {
	b.Queue(claim.Gated(func(claimed string) string {
		return `
		WITH rotated AS (
		    UPDATE webhook_endpoints
		    SET previous_secret_sealed = secret_sealed, previous_secret_id = secret_id, previous_secret_expires_at = $5,
		        secret_sealed = $4, secret_id = $3
		    WHERE id = $1 AND tenant_id = $2 AND deleted_at IS NULL AND ` + claimed + `
		    RETURNING id
		)
		SELECT ` + refuse.Unless(claim.Implies(claimed, "EXISTS (SELECT FROM rotated)"), refuseNotFound, "'no such webhook endpoint'", "")
	}, endpointID, tenant, rotationID, sealed, expires))
}

const columns = `id, tenant_id, url, event_types, description, status, COALESCE(secret_sealed, ''), secret_id, created_at,
	disabled_at, COALESCE(disabled_reason, '')`

func scan(row pgx.CollectableRow) (Endpoint, error) {
	var e Endpoint
	err := row.Scan(&e.ID, &e.TenantID, &e.URL, &e.EventTypes, &e.Description, &e.Status, &e.sealed, &e.SecretID,
		&e.CreatedAt, &e.DisabledAt, &e.DisabledReason)
	e.CreatedAt = e.CreatedAt.UTC()
	if e.DisabledAt != nil {
		at := e.DisabledAt.UTC()
		e.DisabledAt = &at
	}
	return e, err
}

// one returns the one endpoint rows holds, or ErrNotFound.
func one(rows pgx.Rows, err error) (Endpoint, error) {
	if err != nil {
		return Endpoint{}, fmt.Errorf("read webhook endpoint: %w", err)
	}
	e, err := pgx.CollectExactlyOneRow(rows, scan)
	if errors.Is(err, pgx.ErrNoRows) {
		return Endpoint{}, ErrNotFound
	}
	if err != nil {
		return Endpoint{}, fmt.Errorf("read webhook endpoint: %w", err)
	}
	return e, nil
}

// get returns the tenant's endpoint id, unless deleted, or ErrNotFound.
func get(ctx context.Context, db *pgxpool.Pool, tenant, id string) (Endpoint, error) {
	return one(db.Query(ctx, `SELECT `+columns+` FROM webhook_endpoints
		WHERE id = $1 AND tenant_id = $2 AND deleted_at IS NULL`, id, tenant))
}

// getBySecret returns the tenant's endpoint one of whose two secrets was set
// by secretID, and that secret, or ErrNotFound (it was rotated out since,
// or the endpoint was deleted), as of now.
func getBySecret(ctx context.Context, db *pgxpool.Pool, tenant, secretID string, now time.Time) (Endpoint, error) {
	return one(db.Query(ctx, `SELECT `+columns+` FROM (
		    SELECT id, tenant_id, url, event_types, description, status, secret_sealed, secret_id, created_at,
		           disabled_at, disabled_reason, deleted_at
		    FROM webhook_endpoints WHERE tenant_id = $1 AND secret_id = $2
		  UNION ALL
		    SELECT id, tenant_id, url, event_types, description, status, previous_secret_sealed, previous_secret_id, created_at,
		           disabled_at, disabled_reason, deleted_at
		    FROM webhook_endpoints WHERE tenant_id = $1 AND previous_secret_id = $2 AND previous_secret_expires_at > $3
		) e WHERE deleted_at IS NULL`, tenant, secretID, now))
}

// list returns the tenant's endpoints, newest first.
func list(ctx context.Context, db *pgxpool.Pool, tenant string) ([]Endpoint, error) {
	rows, err := db.Query(ctx, `SELECT `+columns+` FROM webhook_endpoints
		WHERE tenant_id = $1 AND deleted_at IS NULL ORDER BY created_at DESC, id DESC`, tenant)
	if err != nil {
		return nil, fmt.Errorf("list webhook endpoints: %w", err)
	}
	out, err := pgx.CollectRows(rows, scan)
	if err != nil {
		return nil, fmt.Errorf("list webhook endpoints: %w", err)
	}
	if out == nil {
		out = []Endpoint{}
	}
	return out, nil
}

// remove deletes the tenant's endpoint id (its row stays, for its messages'
// history, but no read shows it again) and abandons its pending messages,
// in one statement, so that nothing more is sent to it; a message in flight
// finds itself abandoned when it books its attempt, and books nothing.
// ErrNotFound when there is no such endpoint.
func remove(ctx context.Context, db pgx.Tx, tenant, id string, now time.Time) error {
	var found bool
	err := db.QueryRow(ctx, `
		WITH deleted AS (
		    UPDATE webhook_endpoints SET deleted_at = $3
		    WHERE id = $1 AND tenant_id = $2 AND deleted_at IS NULL
		    RETURNING id
		), abandoned AS (
		    UPDATE webhook_messages m SET status = 'abandoned', claimed_until = NULL, finished_at = $3
		    FROM deleted d WHERE m.endpoint_id = d.id AND m.status = 'pending'
		)
		SELECT EXISTS (SELECT FROM deleted)`, id, tenant, now).Scan(&found)
	if err != nil {
		return fmt.Errorf("delete webhook endpoint: %w", err)
	}
	if !found {
		return ErrNotFound
	}
	return nil
}
