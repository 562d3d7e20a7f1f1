package secretbox

import (
	"bytes"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
)

func key(b byte) []byte { return bytes.Repeat([]byte{b}, KeyBytes) }

// A sealed value opens under its key and context only, shows nothing of
// the plaintext, and differs each time; an altered one does not open.
func TestSealOpensUnderItsKeyAndContextOnly(t *testing.T) {
	box, err := New(key(1))
	if err != nil {
		t.Fatal(err)
	}
	const secret = "whsec_c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0"
	a, err := box.Seal(secret, "we_1")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := box.Seal(secret, "we_1")
	if a == b || strings.Contains(a, "whsec_") || !strings.HasPrefix(a, "v1:") || !Sealed(a) {
		t.Fatalf("sealed %q and %q", a, b)
	}
	if got, err := box.Open(a, "we_1"); err != nil || got != secret {
		t.Fatalf("open: %q, %v", got, err)
	}
	if _, err := box.Open(a, "we_2"); err == nil {
		t.Error("opened under another context")
	}
	other, _ := New(key(2))
	if _, err := other.Open(a, "we_1"); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("another key: %v, want ErrUnknownKey", err)
	}
	altered := a[:len(a)-2] + "AA"
	if altered == a {
		altered = a[:len(a)-2] + "BB"
	}
	if _, err := box.Open(altered, "we_1"); err == nil {
		t.Error("an altered value opened")
	}
	if _, err := box.Open(secret, "we_1"); !errors.Is(err, ErrNotSealed) {
		t.Errorf("a plaintext: %v, want ErrNotSealed", err)
	}
}

// A Box with a new key and the old one opens what either sealed, and
// seals under the new one.
func TestOlderKeysStillOpen(t *testing.T) {
	old, _ := New(key(1))
	sealed, _ := old.Seal("s", "c")
	box, err := New(key(2), key(1))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := box.Open(sealed, "c"); err != nil || got != "s" {
		t.Fatalf("open an old value: %q, %v", got, err)
	}
	fresh, _ := box.Seal("s", "c")
	if _, err := old.Open(fresh, "c"); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("a new value opened under the old key alone: %v", err)
	}
}

// Reseal moves a value under the current key and leaves one already there
// untouched; a value under a key the Box lacks stays unreadable.
func TestResealMovesAValueUnderTheCurrentKey(t *testing.T) {
	old, _ := New(key(1))
	sealed, _ := old.Seal("s", "c")
	box, _ := New(key(2), key(1))
	again, moved, err := box.Reseal(sealed, "c")
	if err != nil || !moved || again == sealed {
		t.Fatalf("reseal an old value: %q, %v, %v", again, moved, err)
	}
	current, _ := New(key(2))
	if got, err := current.Open(again, "c"); err != nil || got != "s" {
		t.Errorf("the resealed value under the new key alone: %q, %v", got, err)
	}
	if same, moved, err := box.Reseal(again, "c"); err != nil || moved || same != again {
		t.Errorf("reseal a current value: %v, %v; want it unchanged", moved, err)
	}
	if _, _, err := current.Reseal(sealed, "c"); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("reseal under a key the box lacks: %v", err)
	}
}

func TestParseKey(t *testing.T) {
	k := key(7)
	for _, s := range []string{base64.StdEncoding.EncodeToString(k), base64.RawURLEncoding.EncodeToString(k), " " + base64.URLEncoding.EncodeToString(k) + "\n"} {
		if got, err := ParseKey(s); err != nil || !bytes.Equal(got, k) {
			t.Errorf("ParseKey(%q) = %x, %v", s, got, err)
		}
	}
	for _, s := range []string{"", "not base64!", base64.StdEncoding.EncodeToString(key(1)[:16])} {
		if _, err := ParseKey(s); err == nil {
			t.Errorf("ParseKey(%q) accepted", s)
		}
	}
	n, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParseKey(n); err != nil {
		t.Errorf("NewKey's %q: %v", n, err)
	}
	if _, err := New(key(1)[:31]); err == nil {
		t.Error("New took a short key")
	}
}
