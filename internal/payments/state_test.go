package payments

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/paymentsapi/paymentsapi/internal/pgtest"
	"github.com/paymentsapi/paymentsapi/internal/statemachine"
	"github.com/paymentsapi/paymentsapi/internal/statemachine/statemachinetest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

var t0 = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

// insertRaw stores a payment in state with plain SQL, bypassing this
// package, as a careless script would.
func insertRaw(ctx context.Context, tx pgx.Tx, state State) (string, error) {
	id := NewID()
	_, err := tx.Exec(ctx, `
		INSERT INTO payments (id, tenant_id, account_id, amount_minor, currency, merchant_reference,
		    payment_method, channel, state, created_at, updated_at)
		VALUES ($1, 't', 'acc', 100, 'EUR', $1, 'pm_card_visa', 'web', $2, $3, $3)`, id, string(state), t0)
	return id, err
}

// The database, not this package, refuses every move the table does not
// allow: written with plain SQL, from every state to every other.
func TestPaymentStateMachineIsEnforcedByTheDatabase(t *testing.T) {
	t.Parallel()
	statemachinetest.CheckEnforced(t, pgtest.NewPool(t), Machine(), States(), insertRaw)
}

// The code refuses an illegal move before sending anything.
func TestIllegalMoveIsRefusedBeforeItIsSent(t *testing.T) {
	t.Parallel()
	b := &pgx.Batch{}
	err := machine.QueueMove(context.Background(), b, statemachine.Move[State]{ID: "pay_x", From: StateCompleted, To: StateDeclined, At: t0})
	var illegal *statemachine.IllegalMoveError
	if !errors.As(err, &illegal) || b.Len() != 0 {
		t.Fatalf("got %v with %d statements queued, want an IllegalMoveError and none", err, b.Len())
	}
}

// A legal move of a payment that is no longer where its writer thinks is
// refused in the database, and undoes its batch: the batch runs with no
// BEGIN (one implicit transaction, as Owner.Commit sends it), so a check
// made in Go after the answer would leave the write queued before the move
// committed.
func TestGuardedMoveRefusesTheWrongCurrentState(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	var id string
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) (err error) {
		id, err = insertRaw(ctx, tx, StateReceived)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	b := &pgx.Batch{}
	b.Queue(`UPDATE payments SET description = 'written before the move' WHERE id = $1`, id)
	if err := machine.QueueMove(context.Background(), b, statemachine.Move[State]{ID: id, From: StateProviderRequestSent, To: StateUnknown, Reason: "late", At: t0}); err != nil {
		t.Fatal(err)
	}
	err = pool.SendBatch(ctx, b).Close()
	if !statemachine.IsStaleWrite(err) {
		t.Fatalf("got %v, want a stale write", err)
	}
	var state State
	var moves int
	var description string
	if err := pool.QueryRow(ctx, `SELECT state, description, (SELECT count(*) FROM payment_transitions WHERE payment_id = $1) FROM payments WHERE id = $1`, id).Scan(&state, &description, &moves); err != nil {
		t.Fatal(err)
	}
	if state != StateReceived || moves != 0 || description != "" {
		t.Errorf("state %s, description %q, %d transitions recorded: the refused move's batch was not undone", state, description, moves)
	}
}
