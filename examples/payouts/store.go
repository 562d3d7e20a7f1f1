package payouts

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/paymentsapi/paymentsapi/internal/claim"
)

// This file holds every statement on payouts.

// queueInsert adds to b the insert of p, gated on the claim: it writes
// nothing unless the claim took its key.
func queueInsert(b *claim.Batch, p Payout) {
	b.Queue(claim.Gated(func(claimed string) string {
		return `INSERT INTO payouts (id, tenant_id, account_id, amount_minor, currency, destination, state,
		                             first_sent_at, last_sent_at, created_at, updated_at)
		SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $10 WHERE ` + claimed
	}, p.ID, p.TenantID, p.AccountID, p.AmountMinor, p.Currency, p.Destination, string(p.State),
		p.FirstSentAt, p.LastSentAt, p.CreatedAt))
}

// getPayout returns the tenant's payout id, or ErrNotFound.
func getPayout(ctx context.Context, q interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}, tenant, id string) (Payout, error) {
	var p Payout
	err := q.QueryRow(ctx, `
		SELECT id, tenant_id, account_id, amount_minor, currency, destination, state,
		       COALESCE(provider_reference, ''), COALESCE(decline_code, ''), created_at, updated_at,
		       first_sent_at, last_sent_at
		FROM payouts WHERE id = $1 AND tenant_id = $2`, id, tenant).
		Scan(&p.ID, &p.TenantID, &p.AccountID, &p.AmountMinor, &p.Currency, &p.Destination, &p.State,
			&p.ProviderReference, &p.DeclineCode, &p.CreatedAt, &p.UpdatedAt, &p.FirstSentAt, &p.LastSentAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Payout{}, ErrNotFound
	}
	if err != nil {
		return Payout{}, fmt.Errorf("read payout: %w", err)
	}
	p.CreatedAt, p.UpdatedAt = p.CreatedAt.UTC(), p.UpdatedAt.UTC()
	return p, nil
}
