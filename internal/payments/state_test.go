package payments

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/ids"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

var t0 = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

// seedPayment stores a payment in state with a key whose fencing token is token.
func seedPayment(t *testing.T, pool *pgxpool.Pool, state State, token int64) Payment {
	t.Helper()
	ctx := context.Background()
	p := Payment{
		ID: ids.NewPaymentID(), TenantID: "t", State: state, CreatedAt: t0, UpdatedAt: t0,
		Command: Command{AccountID: "acc", AmountMinor: 100, Currency: "EUR",
			MerchantReference: "ref-" + string(state) + ids.NewPaymentID(), PaymentMethod: "pm_card_visa", Channel: "web"},
	}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		scope := idempotency.Scope{Tenant: "t", Operation: OperationCreate, Key: p.ID}
		if _, err := idempotency.Claim(ctx, tx, scope, p.Command.Fingerprint(), p.ID, t0, time.Minute); err != nil {
			return err
		}
		b := &pgx.Batch{}
		queueInsert(b, p, "seed")
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE idempotency_keys SET fencing_token = $2 WHERE payment_id = $1`, p.ID, token)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func stateOf(t *testing.T, pool *pgxpool.Pool, id string) State {
	t.Helper()
	var s State
	if err := pool.QueryRow(context.Background(), `SELECT state FROM payments WHERE id = $1`, id).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

func send(ctx context.Context, pool *pgxpool.Pool, b *pgx.Batch) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return tx.SendBatch(ctx, b).Close() })
}

// Every pair of states: the allowed moves go through; every other move is
// refused by the code and, when the code is bypassed, by the guarded update.
func TestTransitionTableIsEnforcedByTheGuardedUpdate(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	for _, from := range States() {
		for _, to := range States() {
			p := seedPayment(t, pool, from, 1)
			tr := Transition{PaymentID: p.ID, From: from, To: to, Token: 1, Reason: "test", At: t0}
			b := &pgx.Batch{}
			err := queueTransition(b, tr)
			if CanTransition(from, to) {
				if err != nil {
					t.Fatalf("%s -> %s: %v", from, to, err)
				}
				if err := send(ctx, pool, b); err != nil {
					t.Errorf("%s -> %s refused: %v", from, to, err)
				}
				if got := stateOf(t, pool, p.ID); got != to {
					t.Errorf("%s -> %s left %s", from, to, got)
				}
				continue
			}
			var illegal ErrIllegalTransition
			if !errors.As(err, &illegal) {
				t.Errorf("%s -> %s: code allowed it (%v)", from, to, err)
			}
			raw := &pgx.Batch{}
			queueGuardedUpdate(raw, tr)
			if err := send(ctx, pool, raw); !errors.Is(err, ErrStaleWrite) {
				t.Errorf("%s -> %s: the database did not refuse it: %v", from, to, err)
			}
			if got := stateOf(t, pool, p.ID); got != from {
				t.Errorf("%s -> %s moved the payment to %s", from, to, got)
			}
		}
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM payment_transitions WHERE reason = 'test'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if want := len(allowedPairsOrFail(t)); n != want {
		t.Errorf("%d transitions recorded, want %d (one per allowed move)", n, want)
	}
}

func allowedPairsOrFail(t *testing.T) []string {
	froms, tos := allowedPairs()
	if len(froms) == 0 || len(froms) != len(tos) {
		t.Fatalf("transition table is empty or malformed")
	}
	return froms
}

func TestGuardedUpdateRefusesTheWrongCurrentState(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	p := seedPayment(t, pool, StateCompleted, 1)
	b := &pgx.Batch{}
	// A legal move, but the payment is not where the writer thinks it is.
	if err := queueTransition(b, Transition{PaymentID: p.ID, From: StateProviderRequestSent, To: StateUnknown, Token: 1, Reason: "late", At: t0}); err != nil {
		t.Fatal(err)
	}
	if err := send(context.Background(), pool, b); !errors.Is(err, ErrStaleWrite) {
		t.Fatalf("got %v, want ErrStaleWrite", err)
	}
	if got := stateOf(t, pool, p.ID); got != StateCompleted {
		t.Errorf("state %s", got)
	}
}

// An owner whose key was taken over (its token is no longer current) cannot
// move the payment, store an answer, or release the lease.
func TestFencedOutOwnerCannotWrite(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	p := seedPayment(t, pool, StateProviderRequestSent, 2) // the new owner holds token 2

	b := &pgx.Batch{}
	if err := queueTransition(b, Transition{PaymentID: p.ID, From: StateProviderRequestSent, To: StateCompleted, Token: 1, Reason: "late", At: t0}); err != nil {
		t.Fatal(err)
	}
	if err := send(ctx, pool, b); !errors.Is(err, ErrStaleWrite) {
		t.Errorf("transition with an old token: %v", err)
	}
	b = &pgx.Batch{}
	idempotency.QueueFinish(b, p.ID, 1, idempotency.Response{Status: 201, Body: []byte("{}")}, t0)
	if err := send(ctx, pool, b); !errors.Is(err, idempotency.ErrFenced) {
		t.Errorf("finish with an old token: %v", err)
	}
	b = &pgx.Batch{}
	idempotency.QueueRelease(b, p.ID, 1)
	if err := send(ctx, pool, b); !errors.Is(err, idempotency.ErrFenced) {
		t.Errorf("release with an old token: %v", err)
	}
	if got := stateOf(t, pool, p.ID); got != StateProviderRequestSent {
		t.Errorf("state %s", got)
	}
	// The current owner can.
	b = &pgx.Batch{}
	if err := queueTransition(b, Transition{PaymentID: p.ID, From: StateProviderRequestSent, To: StateCompleted, Token: 2, Reason: "owner", At: t0}); err != nil {
		t.Fatal(err)
	}
	idempotency.QueueFinish(b, p.ID, 2, idempotency.Response{Status: 201, Body: []byte("{}")}, t0)
	if err := send(ctx, pool, b); err != nil {
		t.Errorf("current owner refused: %v", err)
	}
}
