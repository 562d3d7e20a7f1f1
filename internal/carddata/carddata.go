// Package carddata finds payment card numbers (PANs) in text, so that the
// API can refuse a request that carries one instead of storing, logging,
// publishing or sending it: the service takes payment method tokens only,
// and a card number anywhere in its database would bring it into the scope
// of PCI DSS.
//
// A card number here is what a person or a program pastes by mistake:
//
//   - 13 to 19 contiguous ASCII digits passing the Luhn check, or
//   - a card's printed layout: groups of 4-4-4-4, 4-4-4-4-3, 4-6-5 or 4-6-4
//     digits, each two separated by one space or one dash, passing the Luhn
//     check as a whole.
//
// A run of digits counts only whole: a card number glued inside a longer
// run of digits (a 20-digit order number) is not one, since every digit
// string of 20 or more would otherwise hold several candidates and one of
// them would pass the Luhn check by chance. Anything else around the digits
// does not matter: "x4111111111111111y" and "pm_4111111111111111" hold a
// card number, since letters and punctuation are exactly what a client
// would glue to one. So "inv-2026-000123-7" holds none (its runs are 4, 6
// and 1 digits long, in no card's layout), while "ref 4111 1111 1111 1111"
// holds one. Only ASCII digits count: other scripts' digits are left to
// the fields' own rules.
//
// The Luhn check lets through one random digit string in ten, so a text
// field holding an unrelated number of 13 to 19 digits (a millisecond
// timestamp) is refused one time in ten: a client that needs such numbers
// separates them, e.g. with a letter every 12 digits.
package carddata

// MinDigits and MaxDigits bound the length of a card number.
const (
	MinDigits = 13
	MaxDigits = 19
)

// layouts are the printed layouts of card numbers: the lengths of their
// groups, each two separated by one space or one dash.
var layouts = [...][]int{
	{4, 4, 4, 4},
	{4, 4, 4, 4, 3},
	{4, 6, 5},
	{4, 6, 4},
}

// maxGroups is the number of groups of the longest layout.
const maxGroups = 5

// Contains reports whether s holds a card number.
func Contains[T ~string | ~[]byte](s T) bool {
	// runs holds the last maxGroups runs of digits, each joined to the one
	// before by a single separator; a run after anything else starts over.
	var runs [maxGroups]span
	n := 0
	for i := 0; i < len(s); {
		if !isDigit(s[i]) {
			i++
			continue
		}
		start := i
		for i < len(s) && isDigit(s[i]) {
			i++
		}
		r := span{start, i}
		if l := r.len(); l >= MinDigits && l <= MaxDigits && luhn(s, r) {
			return true
		}
		joined := n > 0 && start-runs[n-1].end == 1 && isSeparator(s[start-1])
		if !joined {
			n = 0
		}
		if n == maxGroups {
			copy(runs[:], runs[1:])
			n--
		}
		runs[n] = r
		n++
		if printed(s, runs[:n]) {
			return true
		}
	}
	return false
}

// printed reports whether the last runs, joined by single separators, end
// in one of the layouts with a number passing the Luhn check.
func printed[T ~string | ~[]byte](s T, runs []span) bool {
	for _, layout := range layouts {
		if len(layout) > len(runs) {
			continue
		}
		tail := runs[len(runs)-len(layout):]
		fits := true
		for i, want := range layout {
			if tail[i].len() != want {
				fits = false
				break
			}
		}
		if fits && luhn(s, tail...) {
			return true
		}
	}
	return false
}

// span is the run of digits s[start:end].
type span struct{ start, end int }

func (r span) len() int { return r.end - r.start }

// luhn reports whether the digits of the spans, read in order as one
// number, pass the Luhn check: from the rightmost digit leftwards, every
// second digit doubled (less 9 when over 9), the sum a multiple of 10.
func luhn[T ~string | ~[]byte](s T, spans ...span) bool {
	sum, double := 0, false
	for k := len(spans) - 1; k >= 0; k-- {
		for i := spans[k].end - 1; i >= spans[k].start; i-- {
			d := int(s[i] - '0')
			if double {
				d *= 2
				if d > 9 {
					d -= 9
				}
			}
			sum += d
			double = !double
		}
	}
	return sum%10 == 0
}

func isDigit(c byte) bool     { return c >= '0' && c <= '9' }
func isSeparator(c byte) bool { return c == ' ' || c == '-' }

// MaxTokenLength is the length of the longest payment method token.
const MaxTokenLength = 128

// tokenPrefixes begin the payment method tokens the service takes: a
// PaymentMethod, a token, a card or a source, as Stripe and the simulator
// name them.
var tokenPrefixes = [...]string{"pm_", "tok_", "card_", "src_"}

// IsToken reports whether s is a payment method token: one of the
// prefixes pm_, tok_, card_ or src_, then at least one letter, digit or
// underscore (ASCII), at most MaxTokenLength characters in all. A token
// may still hold a card number (pm_4111111111111111): Contains decides
// that.
func IsToken(s string) bool {
	if len(s) > MaxTokenLength {
		return false
	}
	for _, p := range tokenPrefixes {
		if len(s) > len(p) && s[:len(p)] == p {
			for i := len(p); i < len(s); i++ {
				if c := s[i]; !(c == '_' || isDigit(c) || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
					return false
				}
			}
			return true
		}
	}
	return false
}
