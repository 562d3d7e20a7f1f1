package dashboard

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/outbox"
	"github.com/paymentsapi/paymentsapi/internal/payments"
)

// event is a payment's outcome event as the relay publishes it.
func event(b *testing.B, now time.Time) outbox.Event {
	v := payments.View{PaymentID: "pay_1", Status: payments.StatusSucceeded, AccountID: "acc_1", Amount: "10.00", Currency: "EUR",
		MerchantReference: "inv-1", PaymentMethod: "pm_card_visa", Channel: "web", RefundedAmount: "0.00", CreatedAt: now, UpdatedAt: now,
		ProviderReference: "ch_1", CaptureMethod: "automatic"}
	body, err := json.Marshal(v)
	if err != nil {
		b.Fatal(err)
	}
	return outbox.Event{ID: "0", Type: payments.EventSucceeded, AggregateType: payments.ResourceType, AggregateID: "pay_1",
		OccurredAt: now, Payload: append([]byte(`{"tenantId":"tenant_a",`), body[1:]...)}
}

// BenchmarkCount measures what the broadcaster spends on every event the
// relay published (on its own goroutine, never the relay's): a scan of its
// payload, and its count in the Overview.
func BenchmarkCount(b *testing.B) {
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	e, a := event(b, now), newActivity()
	b.ReportAllocs()
	for b.Loop() {
		tenant, ok := peek(e.Payload, "tenantId")
		if !ok {
			b.Fatal("no tenant")
		}
		a.add(tenant, e, now)
	}
}

// BenchmarkDecode measures what an event costs more when a page of its
// tenant listens: its decoding.
func BenchmarkDecode(b *testing.B) {
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	e := event(b, now)
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := decode(e, now); !ok {
			b.Fatal("not decoded")
		}
	}
}
