package payments

import (
	"context"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/provider"
)

// lookupRecorder answers every Lookup with its charge, and records what it
// was asked.
type lookupRecorder struct {
	provider.Provider // nil: any other call panics
	charge            provider.Charge
	asked             []provider.ChargeLookup
}

func (r *lookupRecorder) Lookup(_ context.Context, l provider.ChargeLookup) (provider.Charge, error) {
	r.asked = append(r.asked, l)
	return r.charge, nil
}

// A lookup asks for the payment's key, among the charges created since the
// payment was, less an hour (clockSkewMargin) for our clock running ahead of
// the provider's.
func TestLookupAsksFromBeforeThePaymentWasCreated(t *testing.T) {
	created := time.Date(2025, 3, 1, 12, 0, 0, 500, time.UTC)
	rec := &lookupRecorder{charge: provider.Charge{ID: "pi_1", Status: provider.StatusSucceeded}}
	s := &Service{d: Deps{Provider: rec}}
	got, err := inFlow{s, Payment{ID: "pay_1", CreatedAt: created}}.Lookup(context.Background())
	if err != nil || got.ID != "pi_1" || got.Status != provider.StatusSucceeded {
		t.Errorf("lookup = %+v, %v; want pi_1 succeeded", got, err)
	}
	want := provider.ChargeLookup{IdempotencyKey: ProviderKey("pay_1"), NotBefore: created.Add(-time.Hour)}
	if len(rec.asked) != 1 || rec.asked[0] != want {
		t.Errorf("the provider was asked %+v, want once %+v", rec.asked, want)
	}
}
