package authorizations_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/paymentsapi/paymentsapi/internal/authorizations"
	"github.com/paymentsapi/paymentsapi/internal/ids"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
	"github.com/paymentsapi/paymentsapi/internal/statemachine/statemachinetest"
)

// The database, not this package, refuses every move the actions' table of
// moves does not allow: written with plain SQL, from every state to every
// other.
func TestActionStateMachineIsEnforcedByTheDatabase(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	insertRaw := func(ctx context.Context, tx pgx.Tx, state authorizations.State) (string, error) {
		pay, id := ids.New("pay_"), ids.New("cap_")
		if _, err := tx.Exec(ctx, `
			INSERT INTO payments (id, tenant_id, account_id, amount_minor, currency, merchant_reference,
			    payment_method, channel, state, created_at, updated_at, capture_method)
			VALUES ($1, 't', 'acc', 100, 'EUR', $1, 'pm_card_visa', 'web', 'RECEIVED', $2, $2, 'manual')`, pay, t0); err != nil {
			return "", err
		}
		_, err := tx.Exec(ctx, `
			INSERT INTO payment_actions (id, tenant_id, payment_id, kind, amount_minor, currency, state, created_at, updated_at)
			VALUES ($1, 't', $2, 'capture', 100, 'EUR', $3, $4, $4)`, id, pay, string(state), t0)
		return id, err
	}
	statemachinetest.CheckEnforced(t, pgtest.NewPool(t), authorizations.Machine(), authorizations.States(), insertRaw)
}
