package dashboard

import (
	"testing"
	"time"

	"github.com/paymentsapi/paymentsapi/internal/outbox"
	"github.com/paymentsapi/paymentsapi/internal/payments"
)

// outcomeEvent is an event of type typ that happened at at, about a
// payment created latency before it, as the payments write it.
func outcomeEvent(typ string, at time.Time, latency time.Duration) outbox.Event {
	return outbox.Event{Type: typ, AggregateType: payments.ResourceType, AggregateID: "pay_1", OccurredAt: at,
		Payload: []byte(`{"paymentId":"pay_1","status":"X","createdAt":"` + at.Add(-latency).Format(time.RFC3339Nano) + `","tenantId":"t"}`)}
}

func TestTheOverviewCountsEachOutcomeInItsMinuteForItsTenantAndForAll(t *testing.T) {
	now := time.Date(2026, 11, 22, 12, 30, 10, 0, time.UTC)
	a := newActivity()
	for _, o := range []struct {
		tenant  string
		typ     string
		ago     time.Duration
		latency time.Duration
	}{
		{"t1", payments.EventSucceeded, 0, 200 * time.Millisecond},
		{"t1", payments.EventDeclined, 0, 3 * time.Second},
		{"t2", payments.EventSucceeded, 5 * time.Minute, 50 * time.Millisecond},
		{"t1", payments.EventCreated, 0, 0},               // not an outcome
		{"t1", payments.EventSucceeded, 2 * time.Hour, 0}, // older than the window
		{"t2", payments.EventSucceeded, 58 * time.Minute, 0},
		// From a clock ahead: its bucket is that of 58 minutes ago, which
		// it must not take over.
		{"t1", payments.EventSucceeded, -2 * time.Minute, 0},
		{"t2", payments.EventAuthorized, 59 * time.Minute, 0},
	} {
		a.add(o.tenant, outcomeEvent(o.typ, now.Add(-o.ago), o.latency), now)
	}
	t1, all := a.lastHour("t1", now), a.lastHour("", now)
	last := len(t1) - 1
	if got := t1[last].outcomes; got != [4]int{1, 1, 0, 0} {
		t.Errorf("t1's last minute: %v, want one succeeded and one declined", got)
	}
	if got := t1[last].p95(); got != 5 {
		t.Errorf("t1's p95 this minute: %vs, want the bucket of 3s (5s)", got)
	}
	if got := all[last-5].outcomes[0]; got != 1 {
		t.Errorf("every tenant's minute 5 ago: %d succeeded, want 1", got)
	}
	if got := all[0].outcomes[3]; got != 1 {
		t.Errorf("every tenant's oldest minute: %d authorized, want 1", got)
	}
	if got := all[1].outcomes[0]; got != 1 {
		t.Errorf("every tenant's minute 58 ago: %d succeeded, want 1 (an event from a clock ahead took its bucket?)", got)
	}
	total := 0
	for _, m := range all {
		for _, n := range m.outcomes {
			total += n
		}
	}
	if total != 5 {
		t.Errorf("%d outcomes counted in the hour, want 5 (none outside the window)", total)
	}
	if got := a.lastHour("t3", now)[last].outcomes; got != [4]int{} {
		t.Errorf("a tenant without events: %v", got)
	}
}

func TestTheAPIsP95IsReadFromTheHistogramsIncrease(t *testing.T) {
	bounds := []float64{0.1, 0.5, 1}
	prev := histogram{bounds: bounds, counts: []uint64{100, 100, 100}, total: 100}
	// 20 more requests: 18 under 0.1 s, 2 between 0.5 and 1 s.
	now := histogram{bounds: bounds, counts: []uint64{118, 118, 120}, total: 120}
	if got := now.p95Since(prev); got != 1 {
		t.Errorf("p95 of the minute: %v, want 1 (the 19th of 20 took up to 1 s)", got)
	}
	if got := now.p95Since(now); got != 0 {
		t.Errorf("p95 of a minute without requests: %v, want 0", got)
	}
	restarted := histogram{bounds: bounds, counts: []uint64{10, 10, 10}, total: 10}
	if got := restarted.p95Since(now); got != 0.1 {
		t.Errorf("p95 after a restart: %v, want 0.1 (the new counts alone)", got)
	}
}

// The broadcaster reads a payload's tenant without decoding it, as the
// service writes it and as the relay reads it back from jsonb.
func TestPeekReadsAMemberOfAFlatObject(t *testing.T) {
	for _, c := range []struct {
		payload, want string
		ok            bool
	}{
		{`{"paymentId":"pay_1","tenantId":"t1"}`, "t1", true},
		{`{"amount": "1.00", "tenantId": "t1", "paymentId": "pay_1"}`, "t1", true},
		{`{"description": "see \"tenantId\": \"evil\"", "tenantId": "t1"}`, "t1", true},
		{`{"tenantIdx": "no", "tenantId" :"t1"}`, "t1", true},
		{`{"tenantId": "t\"1"}`, "", false},
		{`{"tenantId": 7}`, "", false},
		{`{"paymentId": "pay_1"}`, "", false},
	} {
		got, ok := peek([]byte(c.payload), "tenantId")
		if got != c.want || ok != c.ok {
			t.Errorf("peek(%s) = %q, %v; want %q, %v", c.payload, got, ok, c.want, c.ok)
		}
	}
}
