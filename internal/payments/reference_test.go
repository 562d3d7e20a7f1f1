package payments

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paymentsapi/paymentsapi/internal/claim"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
	"github.com/paymentsapi/paymentsapi/internal/refuse"
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
// written for them. That holds since the contract step of 00015 (00019)
// dropped payments_merchant_reference_key, whose predicate was on state. The
// counts are those of the test's own transaction (pg_stat_get_xact_*), which
// is alone on its page.
func TestMovesThatKeepTheReferenceAreHOTUpdates(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		pool    func(testing.TB) *pgxpool.Pool
		wantHOT int
	}{
		{"migrated", pgtest.NewPool, 2},
		{"contracted", pgtest.NewContractedPool, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if updated, hot := happyPathMoves(t, tc.pool(t)); updated != 2 || hot != tc.wantHOT {
				t.Errorf("the happy path's moves: %d updates, %d of them HOT; want 2 and %d", updated, hot, tc.wantHOT)
			}
		})
	}
}

// happyPathMoves moves a new payment RECEIVED -> PROVIDER_REQUEST_SENT ->
// COMPLETED with the state machine's statements and counts the updates of
// payments, and the HOT ones among them.
func happyPathMoves(t *testing.T, pool *pgxpool.Pool) (updated, hot int) {
	t.Helper()
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
			if err := machine.QueueMove(context.Background(), b, mv); err != nil {
				return err
			}
		}
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT pg_stat_get_xact_tuples_updated('payments'::regclass),
		                            pg_stat_get_xact_tuples_hot_updated('payments'::regclass)`).Scan(&updated, &hot)
	})
	if err != nil {
		t.Fatal(err)
	}
	return updated, hot
}

// Two inserts of one merchant reference by different claims, at the same
// moment: one payment, and the other statement refuses
// (refuseReferenceHeld), never with a unique violation. An insert whose ON
// CONFLICT named one unique index on the reference would get a unique
// violation (a 500) from another in about one race in ten, whenever the
// schema has two (as during a rolling upgrade past 00015). Each batch is what the claim sends: one implicit
// transaction, with the claim's setting on.
func TestSimultaneousInsertsOfOneReference(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	insert := func(id, ref string) error {
		b := &pgx.Batch{}
		b.Queue(claim.Claimed())
		queueInsertPayment(claim.After(b), Payment{ID: id, TenantID: "tenant_a", State: StateReceived, CreatedAt: t0, UpdatedAt: t0,
			Command: Command{AccountID: "acc_1", AmountMinor: 1000, Currency: "EUR", MerchantReference: ref,
				PaymentMethod: "pm_card_visa", Channel: "web"}})
		return pool.SendBatch(ctx, b).Close()
	}
	for i := range 200 {
		ref := fmt.Sprintf("inv-race-%d", i)
		var errs [4]error
		var wg sync.WaitGroup
		start := make(chan struct{})
		for j := range errs {
			wg.Go(func() {
				<-start
				errs[j] = insert(fmt.Sprintf("pay_race_%d_%d", i, j), ref)
			})
		}
		close(start)
		wg.Wait()
		// One inserts; each other refuses, naming the holder, or no one
		// when the statement's snapshot predates the holder's commit (it
		// waited for it): Create then tries again, and that claim sees it.
		won := slices.IndexFunc(errs[:], func(err error) bool { return err == nil })
		for j, err := range errs {
			if j == won {
				continue
			}
			holder, held := refuse.Is(err, refuseReferenceHeld)
			if won < 0 || !held || (holder != fmt.Sprintf("pay_race_%d_%d", i, won) && holder != "") {
				t.Fatalf("round %d: %v; want one insert and refusals", i, errs)
			}
		}
	}
}
