package providerflow_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/idempotency"
	smt "github.com/paymentsapi/paymentsapi/internal/statemachine/statemachinetest"
)

// DEFECT (found by TestMoneyFlow, not fixed here): when the reconciler's
// lookup finds nothing and its resend's outcome is unknown (refused after a
// lookup, or timed out), the key is due again at once. Flow.move holds the
// key with LookBy(now), which lowers the successor the reconciler's claim
// had booked (now + backoff) to the time of the send; the release's
// LookSoon then keeps that. The same pass claims the key again, and again:
// at one instant it sends RecoveryPolicy.MaxAttempts times and leaves the
// widget for manual review, instead of one attempt per backoff.
//
// Each resend carries the same key, so no money moves twice; but the
// backoff is defeated (the provider is hammered while it is failing) and
// a flapping provider sends keys to manual review within one pass.
func TestReconcilerResendKeepsItsBackoff(t *testing.T) {
	t.Parallel()
	for _, b := range []behaviour{refuses, losesUnsent} {
		t.Run(fmt.Sprint(b), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			rg := newRig(t, false, 0)
			rg.provider.sends = []behaviour{losesUnsent}
			if _, err := rg.engine.Do(ctx, rg.op, rg.op.request()); err != nil {
				t.Fatal(err)
			}
			rg.clk.Set(t0.Add(3 * time.Minute))
			rg.provider.sends = slices.Repeat([]behaviour{b}, 100)
			stats, err := rg.rc.RunOnce(ctx, 100)
			if err != nil {
				t.Fatal(err)
			}
			key := readKey(t, rg.pool)
			if len(stats) != 1 || stats[idempotency.OutcomeUnresolved] != 1 || rg.provider.sendCalls != 2 || key.review {
				t.Errorf("one pass at one instant: %v, %d sends after the first request's, manual review %v; "+
					"want one unresolved attempt and one send", stats, rg.provider.sendCalls-1, key.review)
			}
			ceiling := policy.Backoff.Ceiling(1)
			now := rg.clk.Now()
			if key.next == nil || key.next.Before(now.Add(ceiling/2)) {
				t.Errorf("next look at %v, want the backoff after the attempt: %v + [%v, %v]", since(key.next), now.Sub(t0), ceiling/2, ceiling)
			}
			if w := readWidget(t, rg.pool); w.state != smt.WidgetUnknown {
				t.Errorf("widget %s, want %s", w.state, smt.WidgetUnknown)
			}
		})
	}
}
