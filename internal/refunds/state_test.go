package refunds

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/paymentsapi/paymentsapi/internal/payments"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
	"github.com/paymentsapi/paymentsapi/internal/statemachine/statemachinetest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// The database refuses every refund move the table does not allow, written
// with plain SQL from every state.
func TestRefundStateMachineIsEnforcedByTheDatabase(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	statemachinetest.CheckEnforced(t, pgtest.NewPool(t), Machine(), States(), func(ctx context.Context, tx pgx.Tx, s State) (string, error) {
		pay := payments.NewID()
		if _, err := tx.Exec(ctx, `
			INSERT INTO payments (id, tenant_id, account_id, amount_minor, currency, merchant_reference,
			    payment_method, channel, state, created_at, updated_at)
			VALUES ($1, 't', 'acc', 100, 'EUR', $1, 'pm_card_visa', 'web', 'RECEIVED', $2, $2)`, pay, t0); err != nil {
			return "", err
		}
		id := NewID()
		_, err := tx.Exec(ctx, `
			INSERT INTO refunds (id, tenant_id, payment_id, amount_minor, currency, state, created_at, updated_at)
			VALUES ($1, 't', $2, 100, 'EUR', $3, $4, $4)`, id, pay, string(s), t0)
		return id, err
	})
}
