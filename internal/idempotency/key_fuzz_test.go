package idempotency

import (
	"errors"
	"strings"
	"testing"
)

// FuzzParseKey feeds ParseKey one or two header lines (lines%3 of them,
// from first and second). It must never panic and must answer either one
// of its two errors or a key of 1 to 255 printable ASCII characters; a plain
// value means itself once trimmed, and the structured-field form of any key
// it accepts parses back to that key. Seeds: testdata/fuzz/FuzzParseKey.
func FuzzParseKey(f *testing.F) {
	f.Fuzz(func(t *testing.T, first, second string, lines uint8) {
		values := []string{first, second}[:lines%3]
		key, err := ParseKey(values)
		if err != nil {
			if key != "" || !(errors.Is(err, ErrKeyMissing) || errors.Is(err, ErrKeyInvalid)) {
				t.Fatalf("ParseKey(%q) = %q, %v: want \"\" and ErrKeyMissing or ErrKeyInvalid", values, key, err)
			}
			return
		}
		if len(values) != 1 {
			t.Fatalf("ParseKey(%q) accepted %d header lines", values, len(values))
		}
		if len(key) < 1 || len(key) > MaxKeyLength {
			t.Fatalf("ParseKey(%q) = %q: %d bytes", values, key, len(key))
		}
		for i := 0; i < len(key); i++ {
			if key[i] < 0x20 || key[i] > 0x7e {
				t.Fatalf("ParseKey(%q) = %q: byte %#x is not printable ASCII", values, key, key[i])
			}
		}
		if plain := strings.TrimSpace(first); !strings.HasPrefix(plain, `"`) && key != plain {
			t.Fatalf("ParseKey(%q) = %q: a plain value means itself", values, key)
		}
		quoted := `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(key) + `"`
		if back, err := ParseKey([]string{quoted}); err != nil || back != key {
			t.Fatalf("the quoted form %q of the key %q parses to %q, %v", quoted, key, back, err)
		}
	})
}
