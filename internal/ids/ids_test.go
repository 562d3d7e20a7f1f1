package ids

import (
	"regexp"
	"testing"
	"time"
)

func TestNewIsPrefixedRandomAndUnique(t *testing.T) {
	re := regexp.MustCompile(`^pay_[0-9a-z]{26}$`)
	seen := map[string]bool{}
	for range 1000 {
		id := New("pay_")
		if !re.MatchString(id) {
			t.Fatalf("malformed id %q", id)
		}
		if seen[id] {
			t.Fatalf("duplicate id %q", id)
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

// The name-based UUID is RFC 9562's: its example, www.example.com in the
// DNS namespace.
func TestNameBasedUUIDIsRFC9562s(t *testing.T) {
	dns := [16]byte{0x6b, 0xa7, 0xb8, 0x10, 0x9d, 0xad, 0x11, 0xd1, 0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8}
	if got := NameBasedUUID(dns, "www.example.com"); got != "2ed6657d-e927-568b-95e1-2665a8aea6a2" {
		t.Errorf("UUIDv5 of www.example.com: %s", got)
	}
}

func TestIsUUID(t *testing.T) {
	for s, want := range map[string]bool{
		NewEventID(time.Unix(0, 0)):            true,
		"0199E2F0-7A1B-7C3D-8E4F-A0B1C2D3E4F5": true,
		"0199e2f0-7a1b-7c3d-8e4f-a0b1c2d3e4f":  false, // one digit short
		"0199e2f07a1b-7c3d-8e4f-a0b1c2d3e4f5a": false, // a dash misplaced
		"0199e2f0-7a1b-7c3d-8e4f-a0b1c2d3e4fg": false,
		"":                                     false,
	} {
		if got := IsUUID(s); got != want {
			t.Errorf("IsUUID(%q) = %v, want %v", s, got, want)
		}
	}
}

// Derive gives New's format, the same id for the same parts, and another id
// for other parts, however the parts' bytes are split between them.
func TestDeriveIsStableAndSeparatesItsParts(t *testing.T) {
	re := regexp.MustCompile(`^re_[0-9a-z]{26}$`)
	a := Derive("re_", []byte("tenant"), []byte("create_refund"), []byte("k1"), []byte("fp"))
	if !re.MatchString(a) {
		t.Fatalf("malformed id %q", a)
	}
	if b := Derive("re_", []byte("tenant"), []byte("create_refund"), []byte("k1"), []byte("fp")); a != b {
		t.Fatalf("the same parts derived %q and %q", a, b)
	}
	for _, parts := range [][][]byte{
		{[]byte("tenant"), []byte("create_refund"), []byte("k2"), []byte("fp")},
		{[]byte("tenant"), []byte("create_refund"), []byte("k1f"), []byte("p")},
		{[]byte("tenan"), []byte("tcreate_refund"), []byte("k1"), []byte("fp")},
		{[]byte("tenant"), []byte("create_refund"), []byte("k1"), []byte("fp"), nil},
	} {
		if b := Derive("re_", parts...); a == b {
			t.Errorf("parts %q derived the same id as the original's", parts)
		}
	}
	// Fixed for ever: a change would break the retry after a lost commit of
	// every resource created before it.
	if got := Derive("pay_", []byte("t"), []byte("payments.create"), []byte("k"), []byte("f")); got != "pay_snx5qnvnfgc25cg9bmn4z7wb0r" {
		t.Errorf("Derive changed: %q", got)
	}
}
