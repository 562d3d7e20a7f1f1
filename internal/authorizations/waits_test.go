package authorizations_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/paymentsapi/paymentsapi/internal/provider"
)

// refusedButAuthorized is a manual payment whose request the provider
// refused after it had authorized it, canceled by its client (cxl-1) while
// the provider's lookups were down: the cancel answered 202, and the
// payment waits in CANCEL_REQUESTED for a lookup to tell. With retried,
// the payment's own client then retries, and the payment is authorized
// (REQUIRES_CAPTURE), with nobody holding it.
func refusedButAuthorized(t *testing.T, e *env, f *faults, retried bool) string {
	t.Helper()
	f.chargeRefusedAfterProcessing.Store(true)
	wantStatus(t, e.pay("pay", "pm_card_visa", true), http.StatusServiceUnavailable, "PROVIDER_UNAVAILABLE")
	var id string
	if err := e.pool.QueryRow(t.Context(), `SELECT id FROM payments`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	f.lookupsRefused.Store(true)
	wantStatus(t, e.cancel(0, id, "cxl-1", ""), http.StatusAccepted, "")
	f.lookupsRefused.Store(false)
	if retried {
		if r := e.pay("pay", "pm_card_visa", true); r.json(t)["status"] != "REQUIRES_CAPTURE" {
			t.Fatalf("the payment's retry: %s", r)
		}
	}
	return id
}

// heldByASecondCancel is refusedButAuthorized's payment, authorized after
// all, whose authorization a second cancel (cxl-2) then took: its void
// refused, it holds the payment (VOID_REQUESTED) until its client retries
// or it is abandoned; cxl-1 waits on it.
func heldByASecondCancel(t *testing.T, e *env, f *faults) string {
	t.Helper()
	id := refusedButAuthorized(t, e, f, true)
	f.voidsRefused.Store(true)
	wantStatus(t, e.cancel(0, id, "cxl-2", ""), http.StatusServiceUnavailable, "PROVIDER_UNAVAILABLE")
	f.voidsRefused.Store(false)
	return id
}

// leaveForAPerson leaves the one key that where (an SQL condition, whose
// parameters are $2 on, args) selects for a person, as the reconciler
// would after its attempts.
func leaveForAPerson(t *testing.T, e *env, where string, args ...any) {
	t.Helper()
	tag, err := e.pool.Exec(t.Context(), `
		UPDATE idempotency_keys SET manual_review_at = $1, recovery_last_error = 'left for a person (test)'
		WHERE `+where, append([]any{e.clk.Now()}, args...)...)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("leaving the key where %s for a person: %v (%d rows)", where, err, tag.RowsAffected())
	}
}

// wantCanceledByTheFirstCancel: the payment is canceled, its charge voided
// once, and cxl-1's retry answers it.
func wantCanceledByTheFirstCancel(t *testing.T, e *env, id string) {
	t.Helper()
	if p := e.payment(id); p["status"] != "CANCELED" {
		t.Fatalf("payment: %v, want CANCELED", p)
	}
	if c := e.charge(id); c.Status != provider.StatusCanceled || c.CaptureRequestCount != 0 {
		t.Fatalf("the provider's charge: %+v", c)
	}
	r := e.cancel(0, id, "cxl-1", "")
	wantStatus(t, r, http.StatusOK, "")
	if r.json(t)["status"] != "CANCELED" {
		t.Fatalf("the first cancel: %s", r)
	}
}

// A cancel that found a payment which moved no money, and that the provider
// turns out to have authorized, voids the authorization within minutes of
// the provider saying so. Before, its key kept the look its claim booked,
// a day later (the abandonment of a cancel that moved nothing), and the
// authorization stood until then, or until its expiry's void (moneysim
// seed 5696).
func TestACancelVoidsAPaymentFoundAuthorizedWithinMinutes(t *testing.T) {
	t.Parallel()
	f := &faults{}
	e := newEnv(t, withFaults(f))
	id := refusedButAuthorized(t, e, f, false)
	for range 6 {
		e.clk.Advance(5 * time.Minute)
		e.reconcile()
	}
	wantCanceledByTheFirstCancel(t, e, id)
}

// A cancel that waits while another action holds the payment's
// authorization waits as long as that action does (here a day: a second
// cancel, refused, that its client never retries, abandoned once the
// replay window has passed), and is never left for a person for waiting;
// then it voids the authorization handed back. Before, each look counted
// as one of the reconciler's failed attempts, and after 20 of them (hours)
// the cancel was left for a person with nothing to decide (moneysim seed
// 5696, where the holder was the expiry's void).
func TestACancelWaitingOnAnotherActionIsNeverLeftForAPersonForIt(t *testing.T) {
	t.Parallel()
	f := &faults{}
	e := newEnv(t, withFaults(f))
	id := heldByASecondCancel(t, e, f)

	for elapsed := time.Duration(0); elapsed < replayTTL+2*time.Hour; elapsed += 10 * time.Minute {
		e.clk.Advance(10 * time.Minute)
		e.reconcile()
		if n := e.count("idempotency_keys WHERE manual_review_at IS NOT NULL"); n != 0 {
			t.Fatalf("after %s, %d keys are left for a person", elapsed+10*time.Minute, n)
		}
	}
	wantCanceledByTheFirstCancel(t, e, id)
	if c := e.charge(id); c.VoidRequestCount != 1 {
		t.Fatalf("the provider's charge: %+v, want one void (the first cancel's)", c)
	}
}

// A void that waits on the action holding the authorization is left for a
// person only when that holder is: never because another void, waiting as
// it does, is. If any unended action on the payment counted, two waiters
// left for a person with a holder could each keep the other there after
// the holder had ended.
func TestAWaiterIsLeftForAPersonOnlyWithTheHolder(t *testing.T) {
	t.Parallel()
	f := &faults{}
	e := newEnv(t, withFaults(f))
	// The holder's client may still retry it: nobody has to decide
	// anything about it.
	id := heldByASecondCancel(t, e, f)
	// The service's expiry void waits too, and is left for a person for a
	// reason of its own.
	leaveForAPerson(t, e, `resource_type = 'cancellation' AND resource_id IN (
		SELECT id FROM payment_actions WHERE payment_id = $2 AND reason = 'authorization_expired')`, id)
	for range 3 {
		e.clk.Advance(5 * time.Minute)
		e.reconcile()
	}
	rows, err := e.pool.Query(t.Context(), `SELECT a.reason FROM idempotency_keys k JOIN payment_actions a ON a.id = k.resource_id
		WHERE k.manual_review_at IS NOT NULL AND a.payment_id = $1 ORDER BY 1`, id)
	if err != nil {
		t.Fatal(err)
	}
	inReview, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(inReview) != 1 || inReview[0] != "authorization_expired" {
		t.Fatalf("keys in review: actions with reasons %q; want only the expiry's void, not the first cancel, which waits on a holder nobody has to decide", inReview)
	}
}

// A client's cancel left for a person because the action holding the
// payment is (it waits on a holder a person must decide) leaves review as
// soon as that holder ends: the holder's end wakes every cancel waiting on
// it, not only the service's expiry void. Then it answers what the holder
// did.
func TestAWaiterLeavesReviewWhenItsHolderEnds(t *testing.T) {
	t.Parallel()
	f := &faults{}
	e := newEnv(t, withFaults(f))
	id := heldByASecondCancel(t, e, f)
	leaveForAPerson(t, e, `idempotency_key = 'cxl-2'`) // the holder
	inReview := func() string {                        // the unended keys left for a person
		t.Helper()
		rows, err := e.pool.Query(t.Context(), `SELECT idempotency_key FROM idempotency_keys
			WHERE manual_review_at IS NOT NULL AND response_status IS NULL ORDER BY 1`)
		if err != nil {
			t.Fatal(err)
		}
		keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(keys)
	}
	for range 3 {
		e.clk.Advance(5 * time.Minute)
		e.reconcile()
	}
	if got := inReview(); got != "[cxl-1 cxl-2]" {
		t.Fatalf("left for a person: %s, want the holder and the cancel waiting on it", got)
	}
	// The holder's client retries, and the void goes through: the waiting
	// cancel is woken out of review in the same transaction, with no pass
	// of the reconciler.
	wantStatus(t, e.cancel(0, id, "cxl-2", ""), http.StatusOK, "")
	if got := inReview(); got != "[]" {
		t.Fatalf("left for a person after the holder ended: %s, want none", got)
	}
	wantCanceledByTheFirstCancel(t, e, id)
}
