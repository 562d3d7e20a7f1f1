package idempotency

import (
	"errors"
	"strings"
	"testing"
)

func TestParseKey(t *testing.T) {
	ok := map[string]string{
		"abc":                                "abc",
		`"abc"`:                              "abc",
		`"a\"b\\c"`:                          `a"b\c`,
		"  padded  ":                         "padded",
		"order-7781:retry 1":                 "order-7781:retry 1",
		strings.Repeat("k", 255):             strings.Repeat("k", 255),
		`"` + strings.Repeat("k", 255) + `"`: strings.Repeat("k", 255),
	}
	for in, want := range ok {
		got, err := ParseKey([]string{in})
		if err != nil || got != want {
			t.Errorf("ParseKey(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := ParseKey(nil); !errors.Is(err, ErrKeyMissing) {
		t.Errorf("no header: %v", err)
	}
	if _, err := ParseKey([]string{"  "}); !errors.Is(err, ErrKeyMissing) {
		t.Errorf("blank header: %v", err)
	}
	bad := []string{
		strings.Repeat("k", 256), `""`, `"abc`, `"a"b"`, `"a\x"`, "caf\u00e9", "tab\there", "nul\x00",
	}
	for _, in := range bad {
		if got, err := ParseKey([]string{in}); !errors.Is(err, ErrKeyInvalid) {
			t.Errorf("ParseKey(%q) = %q, %v; want ErrKeyInvalid", in, got, err)
		}
	}
	if _, err := ParseKey([]string{"a", "b"}); !errors.Is(err, ErrKeyInvalid) {
		t.Errorf("two headers: %v", err)
	}
}
