package payments

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/paymentsapi/paymentsapi/internal/pgtest"
	"github.com/paymentsapi/paymentsapi/internal/statemachine"
)

// The column the merchant reference's unique index is partial on,
// holds_reference, is the database's copy of State.HoldsReference, kept by
// a trigger (migration 00015): in every state a payment can reach, written
// with plain SQL, it says what the Go method says, and a statement that
// writes it wrong is corrected.
func TestHoldsReferenceFollowsTheState(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	for _, s := range States() {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			id, err := insertRaw(ctx, tx, StateReceived)
			if err != nil {
				return err
			}
			for _, step := range machine.PathTo(s) {
				if _, err := tx.Exec(ctx, `UPDATE payments SET state = $2 WHERE id = $1`, id, string(step)); err != nil {
					return err
				}
			}
			var holds bool
			if err := tx.QueryRow(ctx, `SELECT holds_reference FROM payments WHERE id = $1`, id).Scan(&holds); err != nil {
				return err
			}
			if holds != s.HoldsReference() {
				t.Errorf("%s: holds_reference = %v, State.HoldsReference() = %v", s, holds, s.HoldsReference())
			}
			if _, err := tx.Exec(ctx, `UPDATE payments SET holds_reference = NOT holds_reference WHERE id = $1`, id); err != nil {
				return err
			}
			if err := tx.QueryRow(ctx, `SELECT holds_reference FROM payments WHERE id = $1`, id).Scan(&holds); err != nil {
				return err
			}
			if holds != s.HoldsReference() {
				t.Errorf("%s: holds_reference written by hand to %v, not corrected", s, holds)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

// A payment's moves that keep its merchant reference (its whole happy path)
// change no indexed column, so they are HOT updates: no index entry is
// written for them (issue 8). The counts are those of the test's own
// transaction (pg_stat_get_xact_*), which is alone on its page.
func TestMovesThatKeepTheReferenceAreHOTUpdates(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		id, err := insertRaw(ctx, tx, StateReceived)
		if err != nil {
			return err
		}
		b := &pgx.Batch{}
		for _, mv := range []statemachine.Move[State]{
			{ID: id, From: StateReceived, To: StateProviderRequestSent, Reason: "sent", At: t0.Add(time.Second)},
			{ID: id, From: StateProviderRequestSent, To: StateCompleted, Reason: "succeeded", At: t0.Add(2 * time.Second),
				Set: []statemachine.Column{{Name: "provider_reference", Value: "ch_1"}}},
		} {
			if err := machine.QueueMove(b, mv); err != nil {
				return err
			}
		}
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		var updated, hot int
		err = tx.QueryRow(ctx, `SELECT pg_stat_get_xact_tuples_updated('payments'::regclass),
		                               pg_stat_get_xact_tuples_hot_updated('payments'::regclass)`).Scan(&updated, &hot)
		if err != nil {
			return err
		}
		if updated != 2 || hot != 2 {
			t.Errorf("the happy path's moves: %d updates, %d of them HOT; want 2 and 2", updated, hot)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
