package carddata_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/paymentsapi/paymentsapi/internal/carddata"
)

func TestContains(t *testing.T) {
	for _, tt := range []struct {
		s    string
		want bool
	}{
		{"4111111111111111", true},                // Visa's test number
		{"4111111111111112", false},               // one digit off: fails the Luhn check
		{"378282246310005", true},                 // American Express, 15 digits
		{"30569309025904", true},                  // Diners Club, 14 digits
		{"4222222222222", true},                   // 13 digits
		{"6011111111111117", true},                // Discover
		{"4111 1111 1111 1111", true},             // printed 4-4-4-4
		{"4111-1111-1111-1111", true},             // with dashes
		{"4111 1111-1111 1111", true},             // mixed separators
		{"3782 822463 10005", true},               // printed 4-6-5
		{"3056 930902 5904", true},                // printed 4-6-4
		{"6011 0009 9013 9425 006", true},         // printed 4-4-4-4-3, its first 16 digits failing the Luhn check
		{"6011 0009 9013 9425", false},            // those 16 digits alone
		{"6011 0009 9013 9425 0060", false},       // 4-4-4-4-4: no card's layout
		{"6062 8288 8866 6680 0", false},          // 4-4-4-4-1: no card's layout
		{"4111  1111 1111 1111", false},           // two spaces: not a card's layout
		{"4111_1111_1111_1111", false},            // underscores: not a card's layout
		{"x4111111111111111y", true},              // letters glued around it
		{"pm_4111111111111111", true},             // inside a token
		{"card number: 4111111111111111.", true},  // in a sentence
		{"14111111111111111", false},              // 17 digits failing the Luhn check
		{"41111111111111110000", false},           // 20 digits: a card number glued inside is not one
		{"1 4111 1111 1111 1111", true},           // a printed number after another number
		{"4111 1111 1111 1111 1", true},           // and before one
		{"inv-2026-000123-7", false},              // an invoice number
		{"2026-12-02", false},                     // a date
		{"order 123456789012", false},             // 12 digits
		{"", false},                               // nothing
		{"4111111111111111\u200b", true},          // a zero-width space after it
		{"acc_1", false},                          // an account id
		{"0000000000000", true},                   // zeros pass the Luhn check: refused too
		{"+1 555 0100 4111 1111 1111 1111", true}, // a phone number next to a card number
	} {
		if got := carddata.Contains(tt.s); got != tt.want {
			t.Errorf("Contains(%q) = %v, want %v", tt.s, got, tt.want)
		}
		if got := reference(tt.s); got != tt.want {
			t.Errorf("the reference says %v for %q, want %v", got, tt.s, tt.want)
		}
	}
}

func TestIsToken(t *testing.T) {
	for _, tt := range []struct {
		s    string
		want bool
	}{
		{"pm_card_visa", true},
		{"tok_visa", true},
		{"card_1MvoiELkdIwHu7ixOeFh0ZzP", true},
		{"src_1", true},
		{"pm_" + strings.Repeat("a", 125), true},
		{"pm_" + strings.Repeat("a", 126), false}, // 129 characters
		{"pm_", false},
		{"pm", false},
		{"PM_card_visa", false},
		{"pi_123", false},
		{"4111111111111111", false},
		{"pm_card-visa", false},
		{"pm_card visa", false},
		{"pm_cárd", false},
		{"", false},
	} {
		if got := carddata.IsToken(tt.s); got != tt.want {
			t.Errorf("IsToken(%q) = %v, want %v", tt.s, got, tt.want)
		}
	}
}

// FuzzContainsAgreesWithTheReference checks the detector against reference,
// a slow and plain reading of the package's definition, on any text.
// Seeds: testdata/fuzz/FuzzContainsAgreesWithTheReference.
func FuzzContainsAgreesWithTheReference(f *testing.F) {
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := carddata.Contains(s), reference(s); got != want {
			t.Fatalf("Contains(%q) = %v, the reference says %v", s, got, want)
		}
		if carddata.Contains([]byte(s)) != carddata.Contains(s) {
			t.Fatalf("Contains(%q) differs on bytes and on a string", s)
		}
	})
}

// shapes are the package's definition as regular expressions: contiguous
// digits, or a printed layout.
var shapes = regexp.MustCompile(`^(?:[0-9]{13,19}|[0-9]{4}[ -][0-9]{4}[ -][0-9]{4}[ -][0-9]{4}(?:[ -][0-9]{3})?|[0-9]{4}[ -][0-9]{6}[ -][0-9]{4,5})$`)

// reference tries every substring of s: one of the shapes, with no digit
// right before or after it, whose digits pass the Luhn check.
func reference(s string) bool {
	for i := range len(s) {
		if i > 0 && isDigit(s[i-1]) {
			continue
		}
		for j := i + 1; j <= len(s) && j-i <= 23; j++ {
			if j < len(s) && isDigit(s[j]) {
				continue
			}
			if sub := s[i:j]; shapes.MatchString(sub) && luhnOf(strings.Map(digitsOnly, sub)) {
				return true
			}
		}
	}
	return false
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func digitsOnly(r rune) rune {
	if r >= '0' && r <= '9' {
		return r
	}
	return -1
}

// luhnOf is the Luhn check as it is usually written: double every second
// digit from the right, add the digits of the products, and the sum must
// end in 0.
func luhnOf(digits string) bool {
	sum := 0
	for i := range len(digits) {
		d := int(digits[len(digits)-1-i] - '0')
		if i%2 == 1 {
			d *= 2
			d = d/10 + d%10
		}
		sum += d
	}
	return sum%10 == 0
}
