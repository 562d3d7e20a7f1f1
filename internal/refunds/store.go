package refunds

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/paymentsapi/paymentsapi/internal/payments"
)

// This file holds every statement of this package: on refunds, and the
// two it makes on payments (the lock that serialises a payment's refunds,
// and the refunded sum).

// Querier is what the store needs from a pool or a transaction.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// payment is what a refund needs to know of its payment.
type payment struct {
	ID, AccountID, Currency, ProviderReference string
	State                                      payments.State
	AmountMinor                                int64
}

// readPayment returns the tenant's payment id; with lock, it holds the
// payment's row until the transaction ends, so that the refunds of one
// payment are checked one at a time.
func readPayment(ctx context.Context, q Querier, tenant, id string, lock bool) (payment, error) {
	sql := `SELECT id, account_id, currency, COALESCE(provider_reference, ''), state, amount_minor
		FROM payments WHERE id = $1 AND tenant_id = $2`
	if lock {
		sql += ` FOR UPDATE`
	}
	var p payment
	err := q.QueryRow(ctx, sql, id, tenant).Scan(&p.ID, &p.AccountID, &p.Currency, &p.ProviderReference, &p.State, &p.AmountMinor)
	if errors.Is(err, pgx.ErrNoRows) {
		return payment{}, ErrPaymentNotFound
	}
	if err != nil {
		return payment{}, fmt.Errorf("read payment: %w", err)
	}
	return p, nil
}

// committedMinor is what the payment's refunds hold: those that succeeded
// and those that may still (all but declined ones).
func committedMinor(ctx context.Context, q Querier, paymentID string) (int64, error) {
	var n int64
	err := q.QueryRow(ctx, `SELECT COALESCE(sum(amount_minor), 0) FROM refunds WHERE payment_id = $1 AND state <> $2`,
		paymentID, StateDeclined).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("sum refunds: %w", err)
	}
	return n, nil
}

// queueInsert adds the insert of r, in its initial state, to b.
func queueInsert(b *pgx.Batch, r Refund) {
	b.Queue(`
		INSERT INTO refunds (id, tenant_id, payment_id, amount_minor, currency, reason, state, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8)`,
		r.ID, r.TenantID, r.PaymentID, r.AmountMinor, r.Currency, r.Reason, r.State, r.CreatedAt)
}

// queueRefunded adds to b the statement that counts a succeeded refund in
// its payment's refunded amount (never above the payment: a CHECK).
func queueRefunded(b *pgx.Batch, r Refund) {
	b.Queue(`UPDATE payments SET refunded_minor = refunded_minor + $2 WHERE id = $1`, r.PaymentID, r.AmountMinor)
}

const refundColumns = `r.id, r.tenant_id, r.payment_id, p.account_id, r.amount_minor, r.currency, r.reason, r.state,
	COALESCE(r.provider_reference, ''), COALESCE(r.decline_code, ''), r.created_at, r.updated_at`

func scanRefund(row pgx.Row) (Refund, error) {
	var r Refund
	err := row.Scan(&r.ID, &r.TenantID, &r.PaymentID, &r.AccountID, &r.AmountMinor, &r.Currency, &r.Reason, &r.State,
		&r.ProviderReference, &r.DeclineCode, &r.CreatedAt, &r.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Refund{}, ErrNotFound
	}
	if err != nil {
		return Refund{}, fmt.Errorf("read refund: %w", err)
	}
	r.CreatedAt, r.UpdatedAt = r.CreatedAt.UTC(), r.UpdatedAt.UTC()
	return r, nil
}

// getRefund returns the tenant's refund id, or ErrNotFound.
func getRefund(ctx context.Context, q Querier, tenant, id string) (Refund, error) {
	return scanRefund(q.QueryRow(ctx, `SELECT `+refundColumns+`
		FROM refunds r JOIN payments p ON p.id = r.payment_id WHERE r.id = $1 AND r.tenant_id = $2`, id, tenant))
}

// listRefunds returns the refunds of the tenant's payment, oldest first.
func listRefunds(ctx context.Context, q Querier, tenant, paymentID string) ([]Refund, error) {
	rows, err := q.Query(ctx, `SELECT `+refundColumns+`
		FROM refunds r JOIN payments p ON p.id = r.payment_id
		WHERE r.payment_id = $1 AND r.tenant_id = $2 ORDER BY r.created_at, r.id`, paymentID, tenant)
	if err != nil {
		return nil, fmt.Errorf("list refunds: %w", err)
	}
	defer rows.Close()
	out := []Refund{}
	for rows.Next() {
		r, err := scanRefund(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}
