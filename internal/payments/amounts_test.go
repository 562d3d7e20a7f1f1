package payments_test

import (
	"context"
	"testing"

	"github.com/paymentsapi/paymentsapi/internal/provider"
	"github.com/paymentsapi/paymentsapi/internal/servicetest"
)

// otherAmount reports every charge for a hundred times its amount, as an
// adapter that sent an amount in the wrong unit would read it back.
type otherAmount struct{ provider.Provider }

func (o otherAmount) Charge(ctx context.Context, req provider.ChargeRequest) (provider.Charge, error) {
	c, err := o.Provider.Charge(ctx, req)
	c.AmountMinor *= 100
	return c, err
}

func (o otherAmount) Lookup(ctx context.Context, l provider.ChargeLookup) (provider.Charge, error) {
	c, err := o.Provider.Lookup(ctx, l)
	c.AmountMinor *= 100
	return c, err
}

// A payment the provider reports as charged for another amount than the
// payment's is no success: it stays PROCESSING (UNKNOWN_REQUIRES_RECOVERY),
// and its key is left for a person (the reconciler leaves it alone).
func TestAPaymentTheProviderReportsForAnotherAmountIsLeftForAPerson(t *testing.T) {
	t.Parallel()
	e := servicetest.New(t, servicetest.WithProvider(func(p provider.Provider) provider.Provider { return otherAmount{p} }))
	r := e.Do("POST", "/payments", []byte(servicetest.Body()), servicetest.CreateHeaders(servicetest.SecretA, "k-other"))
	got := r.JSON(t)
	if r.Status != 202 || got["status"] != "PROCESSING" {
		t.Fatalf("POST /payments: %d %s; want 202 PROCESSING", r.Status, r.Body)
	}
	id, _ := got["paymentId"].(string)
	if n := e.Count("payments WHERE id = $1 AND state = 'UNKNOWN_REQUIRES_RECOVERY'", id); n != 1 {
		t.Errorf("the payment is not UNKNOWN_REQUIRES_RECOVERY")
	}
	if n := e.Count("idempotency_keys WHERE resource_id = $1 AND manual_review_at IS NOT NULL AND response_status IS NULL", id); n != 1 {
		t.Errorf("the payment's key is not left for manual review")
	}
	if r := e.Do("GET", "/payments/"+id, nil, servicetest.Bearer(servicetest.SecretA)); r.JSON(t)["status"] != "PROCESSING" {
		t.Errorf("GET /payments/%s: %s, want PROCESSING", id, r.Body)
	}
}
