package payments

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/refuse"
)

// Port is what another operation may do with a payment (a refund acts on
// its payment through it): read it, and queue the payments' own statements
// beside its own, so that only this package writes the payments table.
// *Service is the Port; another operation finds it with
// operation.Lookup[payments.Port](env, payments.OperationCreate).
type Port interface {
	// Get returns the tenant's payment, or ErrNotFound.
	Get(ctx context.Context, tenant, id string) (Payment, error)
	// QueueLockSucceeded adds to a claim's batch (idempotency.Request.Create)
	// the lock of the tenant's payment id, which must exist and have
	// succeeded; otherwise the statement refuses (LockRefusal tells which).
	// What is queued after it and acts on the payment runs once a
	// concurrent holder of the lock is done. Like every statement of a
	// claim's batch, it locks and refuses nothing unless the claim took its
	// key (idempotency.Claimed).
	QueueLockSucceeded(b *pgx.Batch, tenant, id string)
	// QueueRefunded adds to b the count of amountMinor refunded of payment
	// id (refundedAmount; never above the payment: a CHECK).
	QueueRefunded(b *pgx.Batch, id string, amountMinor int64)
}

var _ Port = (*Service)(nil)

// CapturedSQL is the SQL expression of the amount captured of the payments
// row aliased alias, in minor units: what its refunds may return in all. It
// is the payments' rule, written once here for the statements of other
// packages that read a payment's row (a refund's check of what is left).
func CapturedSQL(alias string) string { return alias + ".amount_minor" }

// Errors of QueueLockSucceeded's statement, as LockRefusal returns them.
var (
	// ErrNotSucceeded: the payment has not succeeded (it may still).
	ErrNotSucceeded = errors.New("the payment has not succeeded")
)

// The refusals of QueueLockSucceeded.
const (
	refuseLockNotFound     refuse.Code = "PA110"
	refuseLockNotSucceeded refuse.Code = "PA111"
)

func (s *Service) QueueLockSucceeded(b *pgx.Batch, tenant, id string) {
	b.Queue(`
		WITH p AS (SELECT state FROM payments WHERE `+idempotency.Claimed+` AND id = $1 AND tenant_id = $2 FOR UPDATE)
		SELECT `+refuse.Unless(idempotency.ClaimedImplies("EXISTS (SELECT FROM p)"), refuseLockNotFound, "'payment not found'", "")+`,
		       `+refuse.Unless("NOT EXISTS (SELECT FROM p) OR (SELECT state FROM p) = $3", refuseLockNotSucceeded,
		"'payment not succeeded'", ""),
		id, tenant, StateCompleted)
}

// LockRefusal is ErrNotFound or ErrNotSucceeded when err is a refusal of
// QueueLockSucceeded's statement, else nil.
func LockRefusal(err error) error {
	if _, ok := refuse.Is(err, refuseLockNotFound); ok {
		return ErrNotFound
	}
	if _, ok := refuse.Is(err, refuseLockNotSucceeded); ok {
		return ErrNotSucceeded
	}
	return nil
}

func (s *Service) QueueRefunded(b *pgx.Batch, id string, amountMinor int64) {
	b.Queue(`UPDATE payments SET refunded_minor = refunded_minor + $2 WHERE id = $1`, id, amountMinor)
}
