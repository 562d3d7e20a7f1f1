package refunds

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/paymentsapi/paymentsapi/internal/claim"
	"github.com/paymentsapi/paymentsapi/internal/payments"
	"github.com/paymentsapi/paymentsapi/internal/refuse"
)

// This file holds every statement on refunds (and their reads of their
// payments; what a refund writes of its payment, the payments package
// queues through its Port).

// Querier is what the store needs from a pool or a transaction.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// The refusal of queueInsert, mapped back by refusal.
const refuseExceeds refuse.Code = "PA112" // detail: what is left to refund, in minor units

// queueInsert adds to b the insert of r, in its initial state, if its
// payment may be refunded by that much; otherwise the batch refuses (see
// refusal). Two statements, so that the refunds of one payment are checked
// one after the other and those succeeded and in flight never exceed the
// payment:
//
//  1. the payment's row is locked (it must exist and have succeeded),
//     by the payments' own statement (payments.Port); a concurrent refund
//     of the same payment waits here for the other's transaction to end;
//  2. the refunds already holding part of the payment are summed and the
//     refund is inserted only if it fits. Under READ COMMITTED each
//     statement sees what was committed when it started, so this one,
//     started after the lock was granted, sees the refund that held it.
//     (One statement could not: its snapshot would predate the wait.)
//
// Queued after a claim, neither statement locks, writes or refuses unless
// the claim took its key (both are claim.Statements).
func queueInsert(b *claim.Batch, pay payments.Port, r Refund) {
	pay.QueueLockSucceeded(b, r.TenantID, r.PaymentID)
	b.Queue(claim.Gated(func(claimed string) string {
		return `
		WITH left_minor AS (
		    SELECT ` + payments.CapturedSQL("p") + ` - COALESCE((SELECT sum(amount_minor) FROM refunds
		                                      WHERE payment_id = $3 AND state <> $9), 0)::bigint AS minor
		    FROM payments p WHERE ` + claimed + ` AND p.id = $3
		), ins AS (
		    INSERT INTO refunds (id, tenant_id, payment_id, amount_minor, currency, reason, state, created_at, updated_at,
		                         first_sent_at, last_sent_at)
		    SELECT $1, $2, $3, $4::bigint, $5, $6, $7, $8, $8, $10, $11 FROM left_minor WHERE minor >= $4::bigint
		    RETURNING id
		)
		SELECT ` + refuse.Unless(claim.Implies(claimed, "EXISTS (SELECT FROM ins)"), refuseExceeds, "'refund exceeds what is left'",
			"(SELECT minor FROM left_minor)::text")
	}, r.ID, r.TenantID, r.PaymentID, r.AmountMinor, r.Currency, r.Reason, r.State, r.CreatedAt, StateDeclined,
		r.FirstSentAt, r.LastSentAt))
}

// refusal translates queueInsert's refusals, for a refund in currency, into
// the package's errors; any other error is returned as it is.
func refusal(err error, currency string) error {
	switch refused := payments.LockRefusal(err); {
	case errors.Is(refused, payments.ErrNotFound):
		return ErrPaymentNotFound
	case errors.Is(refused, payments.ErrNotSucceeded):
		return ErrNotRefundable
	}
	if detail, ok := refuse.Is(err, refuseExceeds); ok {
		left, perr := strconv.ParseInt(detail, 10, 64)
		if perr != nil {
			return fmt.Errorf("refund refused with an unreadable amount %q: %w", detail, err)
		}
		return &ExceedsRefundableError{RefundableMinor: left, Currency: currency}
	}
	return err
}

const refundColumns = `r.id, r.tenant_id, r.payment_id, p.account_id, r.amount_minor, r.currency, r.reason, r.state,
	COALESCE(r.provider_reference, ''), COALESCE(r.decline_code, ''), r.created_at, r.updated_at,
	r.first_sent_at, r.last_sent_at`

func scanRefund(row pgx.Row) (Refund, error) {
	var r Refund
	err := row.Scan(&r.ID, &r.TenantID, &r.PaymentID, &r.AccountID, &r.AmountMinor, &r.Currency, &r.Reason, &r.State,
		&r.ProviderReference, &r.DeclineCode, &r.CreatedAt, &r.UpdatedAt, &r.FirstSentAt, &r.LastSentAt)
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

// ExistingIDs is the query of which of the ids $1 (text[]) are refunds'
// ids, of any tenant: the audit of the provider's refunds (package
// orphans) asks it which refunds our rows explain.
const ExistingIDs = `SELECT id FROM refunds WHERE id = ANY($1)`

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
