package httpapi

import "testing"

// The text rules cost a plain body (no escape, nothing but ASCII, no card
// number) one pass and no allocation: it is what clients send.
func TestThePlainBodysTextIsCheckedWithoutAllocating(t *testing.T) {
	body := []byte(`{"accountId":"acc_1","amount":"10.00","currency":"EUR","merchantReference":"inv-2026-000123-7",` +
		`"paymentMethod":"pm_card_visa","description":"Order 7781, 2 items"}`)
	if allocs := testing.AllocsPerRun(100, func() {
		if cardData, control := textFaults(body); cardData != nil || control != nil {
			t.Fatalf("faults in a plain body: %v %v", cardData, control)
		}
	}); allocs != 0 {
		t.Errorf("%v allocations for a plain body, want none", allocs)
	}
}
