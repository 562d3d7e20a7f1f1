package authorizations

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paymentsapi/paymentsapi/internal/claim"
)

// This file holds every statement on payment_actions (the state machine's
// guarded moves aside: package statemachine writes those).

// queueInsert adds to a claim's batch the insert of a, in its initial state,
// if the claim took its key.
func queueInsert(b *claim.Batch, a Action) {
	b.Queue(claim.Gated(func(claimed string) string {
		return `
		INSERT INTO payment_actions (id, tenant_id, payment_id, kind, amount_minor, currency, reason, state, created_at, updated_at)
		SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $9 WHERE ` + claimed
	}, a.ID, a.TenantID, a.PaymentID, string(a.Kind), a.AmountMinor, a.Currency, a.Reason, a.State, a.CreatedAt))
}

// ErrNotFound: no such action for this tenant.
var errActionNotFound = errors.New("payment action not found")

func getAction(ctx context.Context, db *pgxpool.Pool, tenant, id string) (Action, error) {
	var a Action
	err := db.QueryRow(ctx, `
		SELECT id, tenant_id, payment_id, kind, amount_minor, currency, reason, state,
		       COALESCE(provider_reference, ''), COALESCE(decline_code, ''), created_at, updated_at,
		       first_sent_at, last_sent_at
		FROM payment_actions WHERE id = $1 AND tenant_id = $2`, id, tenant).
		Scan(&a.ID, &a.TenantID, &a.PaymentID, &a.Kind, &a.AmountMinor, &a.Currency, &a.Reason, &a.State,
			&a.ProviderReference, &a.DeclineCode, &a.CreatedAt, &a.UpdatedAt, &a.FirstSentAt, &a.LastSentAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Action{}, errActionNotFound
	}
	if err != nil {
		return Action{}, fmt.Errorf("read payment action: %w", err)
	}
	a.CreatedAt, a.UpdatedAt = a.CreatedAt.UTC(), a.UpdatedAt.UTC()
	return a, nil
}

// unendedActions are the tenant's actions on payment paymentID, but except,
// that have not ended.
func unendedActions(ctx context.Context, db *pgxpool.Pool, tenant, paymentID, except string) ([]Action, error) {
	rows, err := db.Query(ctx, `
		SELECT id, kind FROM payment_actions
		WHERE payment_id = $1 AND tenant_id = $2 AND id <> $3 AND state NOT IN ($4, $5, $6)`,
		paymentID, tenant, except, StateSucceeded, StateDeclined, StateCanceled)
	if err != nil {
		return nil, fmt.Errorf("read a payment's actions: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Action, error) {
		var a Action
		return a, row.Scan(&a.ID, &a.Kind)
	})
}
