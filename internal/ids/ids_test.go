package ids

import (
	"regexp"
	"testing"
	"time"
)

func TestNewPaymentID(t *testing.T) {
	re := regexp.MustCompile(`^pay_[0-9a-z]{26}$`)
	seen := map[string]bool{}
	for range 1000 {
		id := NewPaymentID()
		if !re.MatchString(id) {
			t.Fatalf("malformed payment id %q", id)
		}
		if seen[id] {
			t.Fatalf("duplicate payment id %q", id)
		}
		seen[id] = true
	}
}

func TestNewEventIDIsUUIDv7AndTimeOrdered(t *testing.T) {
	re := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	a, b := NewEventID(t0), NewEventID(t0.Add(time.Millisecond))
	if !re.MatchString(a) || !re.MatchString(b) {
		t.Fatalf("not UUIDv7: %q %q", a, b)
	}
	if a >= b {
		t.Fatalf("event ids not time-ordered: %q >= %q", a, b)
	}
}
