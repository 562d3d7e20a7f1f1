package simclient_test

import (
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/clock"
	"github.com/paymentsapi/paymentsapi/internal/provider"
	"github.com/paymentsapi/paymentsapi/internal/provider/providertest"
	"github.com/paymentsapi/paymentsapi/internal/provider/sim"
)

// The listings return what the simulator created since the time asked,
// with each object's key and creation time, and nothing older.
func TestListChargesAndRefundsSince(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC))
	s, c := newSim(t, sim.Options{Clock: clk})
	ctx := providertest.Context(t, 5*time.Second)

	old, err := c.Charge(ctx, providertest.ChargeRequest("k-old", sim.MethodVisa))
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Hour)
	cut := clk.Now()
	fresh, err := c.Charge(ctx, providertest.ChargeRequest("k-new", sim.MethodVisa))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Refund(ctx, provider.RefundRequest{IdempotencyKey: "r-new", ChargeID: old.ID, AmountMinor: 100, Currency: "EUR"}); err != nil {
		t.Fatal(err)
	}

	charges, err := c.ListCharges(ctx, cut)
	if err != nil {
		t.Fatal(err)
	}
	if len(charges) != 1 || charges[0].ID != fresh.ID || charges[0].IdempotencyKey != "k-new" || !charges[0].CreatedAt.Equal(cut) {
		t.Errorf("charges since %v = %+v, want only %s", cut, charges, fresh.ID)
	}
	if all, err := c.ListCharges(ctx, time.Time{}); err != nil || len(all) != 2 {
		t.Errorf("every charge = %+v, %v; want both", all, err)
	}
	refunds, err := c.ListRefunds(ctx, cut)
	if err != nil {
		t.Fatal(err)
	}
	if len(refunds) != 1 || refunds[0].IdempotencyKey != "r-new" || refunds[0].ChargeID != old.ID || refunds[0].CreatedAt.IsZero() {
		t.Errorf("refunds since %v = %+v", cut, refunds)
	}
	if later, err := c.ListRefunds(ctx, cut.Add(time.Second)); err != nil || len(later) != 0 {
		t.Errorf("refunds after the last = %+v, %v; want none", later, err)
	}
	if len(s.Charges()) != 2 {
		t.Errorf("the simulator holds %d charges", len(s.Charges()))
	}
}
