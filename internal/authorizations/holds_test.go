package authorizations_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/database"
	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	"github.com/paymentsapi/paymentsapi/internal/pgtest"
	"github.com/paymentsapi/paymentsapi/internal/provider"
)

// faults is a provider whose faults the test switches on and off: the
// first charge refused after it was processed (a refusal that hid an
// authorization), lookups of payments refused, voids and captures whose
// answer is lost before they reach the provider, voids and captures
// refused.
type faults struct {
	provider.Provider
	chargeRefusedAfterProcessing atomic.Bool
	lookupsRefused               atomic.Bool
	voidsLost                    atomic.Bool
	voidsRefused                 atomic.Bool
	capturesLost                 atomic.Bool
	capturesRefused              atomic.Bool
}

func (p *faults) Charge(ctx context.Context, req provider.ChargeRequest) (provider.Charge, error) {
	c, err := p.Provider.Charge(ctx, req)
	if err == nil && p.chargeRefusedAfterProcessing.CompareAndSwap(true, false) {
		return provider.Charge{}, fmt.Errorf("%w: 503 after processing", provider.ErrUnavailable)
	}
	return c, err
}

func (p *faults) Lookup(ctx context.Context, l provider.ChargeLookup) (provider.Charge, error) {
	if p.lookupsRefused.Load() {
		return provider.Charge{}, fmt.Errorf("%w: lookups are down", provider.ErrUnavailable)
	}
	return p.Provider.Lookup(ctx, l)
}

func (p *faults) Void(ctx context.Context, req provider.VoidRequest) (provider.Charge, error) {
	switch {
	case p.voidsLost.Load():
		return provider.Charge{}, fmt.Errorf("%w: the void timed out", provider.ErrUnknownOutcome)
	case p.voidsRefused.Load():
		return provider.Charge{}, fmt.Errorf("%w: 503", provider.ErrUnavailable)
	}
	return p.Provider.Void(ctx, req)
}

func (p *faults) Capture(ctx context.Context, req provider.CaptureRequest) (provider.Charge, error) {
	switch {
	case p.capturesLost.Load():
		return provider.Charge{}, fmt.Errorf("%w: the capture timed out", provider.ErrUnknownOutcome)
	case p.capturesRefused.Load():
		return provider.Charge{}, fmt.Errorf("%w: 503", provider.ErrUnavailable)
	}
	return p.Provider.Capture(ctx, req)
}

func withFaults(f *faults) envOptions {
	return envOptions{wrap: func(p provider.Provider) provider.Provider { f.Provider = p; return f }}
}

// A cancel whose claim found a payment that moved no money (refused), and
// which later finds it authorized after all, never holds the authorization
// if another cancel took it first: it waits for that one's end, and its own
// end (abandoned, or answered) never hands the other's hold back. If the
// payment did not name its holder (held_by), the first cancel's abandonment
// would move VOID_REQUESTED back to AUTHORIZED while the second cancel's
// void was at the provider, and a capture could then begin beside it.
func TestACancelNeverReleasesAnotherActionsHold(t *testing.T) {
	t.Parallel()
	f := &faults{}
	e := newEnv(t, withFaults(f))
	// The first cancel cannot tell yet whether the refused payment moved
	// money: the provider's lookups are down. The payment's own client
	// retries: the provider had authorized it.
	id := refusedButAuthorized(t, e, f, true)
	// Later, a second cancel takes the authorization; its void's answer is
	// lost.
	e.clk.Advance(replayTTL - time.Hour)
	f.voidsLost.Store(true)
	wantStatus(t, e.cancel(0, id, "cxl-2", ""), http.StatusAccepted, "")

	// A day after it, the first cancel's client never came back: the
	// reconciler looks at both. The authorization stays held by the
	// second cancel.
	e.clk.Advance(2 * time.Hour)
	e.reconcile()
	var state, heldBy string
	if err := e.pool.QueryRow(t.Context(), `SELECT state, COALESCE(held_by, '') FROM payments WHERE id = $1`, id).Scan(&state, &heldBy); err != nil {
		t.Fatal(err)
	}
	if state != "VOID_REQUESTED" || heldBy == "" {
		t.Fatalf("while the second cancel's void is unknown the payment is %s held by %q, want VOID_REQUESTED held by it", state, heldBy)
	}
	wantStatus(t, e.capture(0, id, "cap", ""), http.StatusConflict, "PAYMENT_NOT_CAPTURABLE")

	// The void goes through: the payment is canceled, and the first cancel
	// answers that, without a call of its own.
	f.voidsLost.Store(false)
	for range 12 { // the unknown void's backoff grew while it was lost
		e.clk.Advance(10 * time.Minute)
		e.reconcile()
	}
	wantCanceledByTheFirstCancel(t, e, id)
	if n := e.count("payment_actions WHERE payment_id = $1 AND first_sent_at IS NOT NULL", id); n != 1 {
		t.Fatalf("%d actions sent a request, want 1 (the second cancel's)", n)
	}
}

// A capture claimed before the authorization's expiry is never sent after
// it: refused then retried by its client, or lost then looked up by the
// reconciler, it ends 402 CAPTURE_DECLINED (authorization_expired) once the
// provider surely never saw it, and the service's void ends the
// authorization. If the claim alone checked the expiry, the retry would be
// sent.
func TestACaptureIsNeverSentPastTheExpiry(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		fault func(*faults) *atomic.Bool
		first int
	}{
		{"refused, retried by its client", func(f *faults) *atomic.Bool { return &f.capturesRefused }, http.StatusServiceUnavailable},
		{"lost, looked up by the reconciler", func(f *faults) *atomic.Bool { return &f.capturesLost }, http.StatusAccepted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := &faults{}
			e := newEnv(t, withFaults(f))
			id := e.authorized("pay", "pm_card_visa")
			e.clk.Advance(authTTL - time.Hour)
			fault := tc.fault(f)
			fault.Store(true)
			wantStatus(t, e.capture(0, id, "cap", ""), tc.first, "")
			fault.Store(false)

			e.clk.Advance(2 * time.Hour) // past the expiry, inside the provider's key window
			if tc.first == http.StatusAccepted {
				e.reconcile()
			}
			r := e.capture(0, id, "cap", "")
			wantStatus(t, r, http.StatusPaymentRequired, "CAPTURE_DECLINED")
			if got := r.json(t)["declineCode"]; got != "authorization_expired" {
				t.Fatalf("declineCode %v: %s", got, r)
			}
			if c := e.charge(id); c.CaptureRequestCount != 0 || c.Status == provider.StatusSucceeded {
				t.Fatalf("the provider's charge: %+v", c)
			}
			for range 3 {
				e.clk.Advance(time.Minute)
				e.reconcile()
			}
			if p := e.payment(id); p["status"] != "CANCELED" {
				t.Fatalf("payment: %v", p)
			}
			if c := e.charge(id); c.Status != provider.StatusCanceled || c.CaptureRequestCount != 0 {
				t.Fatalf("the provider's charge: %+v", c)
			}
		})
	}
}

// The void the service schedules for itself at an authorization's expiry
// runs under a key no client can send (idempotency.ServiceKey): a client
// that sent that key first would have taken it, and no expiry would have
// been scheduled.
func TestTheExpirysKeyCannotBeSentByAClient(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	id := e.authorized("pay", "pm_card_visa")
	var key string
	if err := e.pool.QueryRow(t.Context(), `SELECT idempotency_key FROM idempotency_keys WHERE operation = 'cancel_payment'`).Scan(&key); err != nil {
		t.Fatal(err)
	}
	if !idempotency.IsServiceKey(key) {
		t.Fatalf("the expiry's key %q is not a service key", key)
	}
	wantStatus(t, e.cancel(0, id, key, ""), http.StatusBadRequest, "IDEMPOTENCY_KEY_INVALID")
	if p := e.payment(id); p["status"] != "REQUIRES_CAPTURE" {
		t.Fatalf("payment: %v", p)
	}
}

// declinesBehindARefusal answers the first capture 503 after the provider
// processed it: a declined capture the service was told was refused.
type declinesBehindARefusal struct {
	provider.Provider
	done atomic.Bool
}

func (p *declinesBehindARefusal) Capture(ctx context.Context, req provider.CaptureRequest) (provider.Charge, error) {
	c, err := p.Provider.Capture(ctx, req)
	if err == nil && p.done.CompareAndSwap(false, true) {
		return provider.Charge{}, fmt.Errorf("%w: 503 after processing", provider.ErrUnavailable)
	}
	return c, err
}

// A capture the provider declined behind a 503, retried by its client after
// the provider forgot its key, is found declined by its lookup (the
// capture's own record) and answered 402: never sent again. A lookup of
// the charge, still authorized, would read as "not found", and the retry
// would make a second capture at the provider (make sim seed 500916).
func TestADeclinedCaptureBehindARefusalIsNeverSentAgain(t *testing.T) {
	t.Parallel()
	p := &declinesBehindARefusal{}
	e := newEnv(t, envOptions{wrap: func(inner provider.Provider) provider.Provider { p.Provider = inner; return p }})
	id := e.authorized("pay", "pm_sim_capture_declined")
	wantStatus(t, e.capture(0, id, "cap", ""), http.StatusServiceUnavailable, "PROVIDER_UNAVAILABLE")
	e.clk.Advance(25 * time.Hour) // past the provider's key window (PROVIDER_KEY_TTL 24h)
	r := e.capture(0, id, "cap", "")
	wantStatus(t, r, http.StatusPaymentRequired, "CAPTURE_DECLINED")
	if n := len(e.sim.Captures()); n != 1 {
		t.Fatalf("the provider holds %d captures, want 1: %+v", n, e.sim.Captures())
	}
	if p := e.payment(id); p["status"] != "REQUIRES_CAPTURE" {
		t.Fatalf("payment: %v", p)
	}
}

// A hold the release before 00023 took names no holder. Migration 00050
// names it after the newest action of its kind, the one that took it, and
// that action ends it.
func TestAHoldTakenBeforeHoldsWereNamedIsNamedAndEndedByItsAction(t *testing.T) {
	t.Parallel()
	f := &faults{}
	e := newEnv(t, withFaults(f))
	id := e.authorized("pay", "pm_card_visa")
	f.capturesLost.Store(true)
	wantStatus(t, e.capture(0, id, "cap", ""), http.StatusAccepted, "")
	f.capturesLost.Store(false)
	backfill := pgtest.MigrationVersion(t, "payments_backfill_pre_release_rows")
	pgtest.MigrateDownTo(t, e.pool, backfill-1)
	// As the release before 00023 left a hold it took.
	if _, err := e.pool.Exec(t.Context(), `UPDATE payments SET held_by = NULL WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	if err := database.Migrate(t.Context(), e.pool, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(time.Minute)
	e.reconcile()
	if p := e.payment(id); p["status"] != "SUCCEEDED" || p["capturedAmount"] != "10.00" {
		t.Fatalf("payment: %v", p)
	}
}
