package validate

import (
	"unicode"

	"github.com/paymentsapi/paymentsapi/internal/carddata"
)

// The rules every string a request's body brings must pass, whatever its
// field and its operation (the HTTP adapter's decoder applies them to each
// string of each body, member names included, before a command is built).
// A field's own rules (lengths, enumerations, formats) come after.

// TextRefusal is why a request's text is refused.
type TextRefusal int

const (
	// TextAccepted: nothing in the text is refused.
	TextAccepted TextRefusal = iota
	// TextCardData: the text holds a card number (package carddata); it is
	// answered CARD_DATA_REFUSED, and never stored, logged, published or
	// sent.
	TextCardData
	// TextControl: the text holds a Unicode control or format character
	// (categories Cc and Cf): a NUL, a line break, a bidirectional override
	// that makes a reference read otherwise than it compares, a zero-width
	// character that makes two references look alike and differ.
	TextControl
)

// Messages of the two refusals, as a FieldError says them.
const (
	CardDataMessage = "holds a card number: send a payment method token (pm_, tok_, card_ or src_), never card data"
	ControlMessage  = "must not hold control or format characters (Unicode categories Cc and Cf, such as line breaks, bidirectional overrides and zero-width characters)"
)

// Text is the verdict of the rules on s: card data first, since that
// refusal is the one that must not be missed.
func Text(s string) TextRefusal {
	switch {
	case carddata.Contains(s):
		return TextCardData
	case HasControl(s):
		return TextControl
	}
	return TextAccepted
}

// HasControl reports whether s holds a rune of category Cc or Cf (an
// invalid byte sequence counts as none: the decoder refuses those before).
func HasControl(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x80 {
			if c < 0x20 || c == 0x7f {
				return true
			}
			continue
		}
		for _, r := range s[i:] {
			if unicode.In(r, unicode.Cc, unicode.Cf) {
				return true
			}
		}
		return false
	}
	return false
}
